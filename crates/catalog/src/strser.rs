//! Serialisation of catalogue types as their `Display` strings (and back through `FromStr`),
//! so that profiles and model files hold the same text the types print.

/// Implements `Serialize` (the `Display` string) and `Deserialize` (through `FromStr`).
macro_rules! string_serde {
    ($t:ty) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

pub(crate) use string_serde;
