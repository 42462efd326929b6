//! The templates of the emitted solver (files under `crates/generator/templates/`, embedded at
//! build time) and how they are filled: every `{{NAME}}` is replaced by the value given for
//! NAME; a placeholder without a value, or a value without a placeholder, is an error, so a
//! template and its filler cannot drift apart silently.
use super::EmitError;

/// The host driver of a plan of one block (CUDA C++, built by nvcc).
pub const SOLVER_CU: &str = include_str!("../../templates/solver.cu");
/// The host driver of a plan split into row blocks over several GPUs (CUDA C++).
pub const SOLVER_BLOCKS_CU: &str = include_str!("../../templates/solver_blocks.cu");
/// What both drivers share ahead of their own types: errors, device memory, the operands.
pub const DRIVER_CUH: &str = include_str!("../../templates/driver.cuh");
/// What both drivers share after their own operations: the solve loop and the C API functions
/// that do not depend on the layout.
pub const DRIVER_API_CUH: &str = include_str!("../../templates/driver_api.cuh");
/// Host-side preconditioner construction and format conversions (plain C++17).
pub const HOST_BUILD_HPP: &str = include_str!("../../templates/host_build.hpp");
/// The C API.
pub const C_HEADER: &str = include_str!("../../templates/autopcg_generated.h");
/// The Fortran interface module of the C API.
pub const FORTRAN_MODULE: &str = include_str!("../../templates/autopcg_generated.f90");
/// The command-line solver: reads a Matrix Market file and prints JSON (plain C++17).
pub const MAIN_CPP: &str = include_str!("../../templates/main.cpp");
/// The build.
pub const CMAKE_LISTS: &str = include_str!("../../templates/CMakeLists.txt");
/// How to build and call the solver.
pub const README_MD: &str = include_str!("../../templates/README.md");

/// Fills `template` (named `name` in errors) with `values`.
pub fn fill(name: &str, template: &str, values: &[(&str, String)]) -> Result<String, EmitError> {
    let mut out = String::with_capacity(template.len() + 1024);
    let mut used = vec![false; values.len()];
    let mut rest = template;
    while let Some(p) = rest.find("{{") {
        out.push_str(&rest[..p]);
        let after = &rest[p + 2..];
        let Some(q) = after.find("}}") else {
            return Err(EmitError::Template {
                template: name.to_string(),
                reason: "a `{{` without `}}`".into(),
            });
        };
        let key = &after[..q];
        if !key
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            || key.is_empty()
        {
            return Err(EmitError::Template {
                template: name.to_string(),
                reason: format!("`{{{{{key}}}}}` is not a placeholder name"),
            });
        }
        match values.iter().position(|(k, _)| *k == key) {
            Some(i) => {
                used[i] = true;
                out.push_str(&values[i].1);
            }
            None => {
                return Err(EmitError::Template {
                    template: name.to_string(),
                    reason: format!("no value for placeholder {key}"),
                })
            }
        }
        rest = &after[q + 2..];
    }
    out.push_str(rest);
    if let Some(i) = used.iter().position(|u| !u) {
        return Err(EmitError::Template {
            template: name.to_string(),
            reason: format!("value {} has no placeholder", values[i].0),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_and_values_must_match() {
        let v = [("A", "1".to_string()), ("B_2", "two".to_string())];
        assert_eq!(fill("t", "x{{A}}y{{B_2}}{{A}}", &v).unwrap(), "x1ytwo1");
        assert!(fill("t", "{{A}}", &v).is_err());
        assert!(fill("t", "{{A}}{{B_2}}{{C}}", &v).is_err());
        assert!(fill("t", "{{A", &v).is_err());
        // C and CUDA code uses `{{` only inside placeholders in the templates.
        assert!(fill("t", "{{a b}}", &[]).is_err());
    }
}
