//! The runner of the emission test files (`harness = false`): each test is listed once with
//! what it needs from the machine — nothing, NVRTC, or an external tool (a C, C++ or Fortran
//! compiler, clang with CUDA support) — and run by `libtest-mimic`, so the binaries take
//! libtest's flags. A test whose need is missing here is reported as ignored, with one line on
//! stderr saying why, never as passed. With `AUTOPCG_REQUIRE_GPU=1` a missing NVRTC fails the
//! test instead, and with `AUTOPCG_REQUIRE_TOOLS=1` a missing tool does.
use std::process::ExitCode;

use libtest_mimic::{Arguments, Completion, Trial};

/// Set to 1 to fail, not ignore, the tests whose tool is missing.
pub const REQUIRE_TOOLS_ENV: &str = "AUTOPCG_REQUIRE_TOOLS";

/// What a test needs.
enum Need {
    Nothing,
    Nvrtc,
    Tool {
        what: &'static str,
        find: fn() -> Option<String>,
    },
}

enum Body {
    Plain(fn()),
    WithTool(fn(&str)),
}

/// One test: its name, what it needs and its body.
pub struct Case {
    name: &'static str,
    need: Need,
    body: Body,
}

impl Case {
    /// A test that needs nothing from the machine.
    pub fn cpu(name: &'static str, body: fn()) -> Case {
        Case {
            name,
            need: Need::Nothing,
            body: Body::Plain(body),
        }
    }

    /// A test that needs NVRTC (no GPU).
    pub fn nvrtc(name: &'static str, body: fn()) -> Case {
        Case {
            name,
            need: Need::Nvrtc,
            body: Body::Plain(body),
        }
    }

    /// A test given the tool `find` finds (`what` names it in the reason it is ignored).
    pub fn tool(
        name: &'static str,
        what: &'static str,
        find: fn() -> Option<String>,
        body: fn(&str),
    ) -> Case {
        Case {
            name,
            need: Need::Tool { what, find },
            body: Body::WithTool(body),
        }
    }
}

fn env_is_1(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v.trim() == "1")
}

/// Runs `cases` as the test binary's `main`.
pub fn run(mut cases: Vec<Case>) -> ExitCode {
    cases.sort_by_key(|c| c.name);
    let args = Arguments::from_args();
    let trials = cases
        .into_iter()
        .map(|c| {
            let selected = !args.is_filtered_out(&Trial::test(c.name, || Ok(())));
            let (missing, tool, env) = match c.need {
                Need::Nothing => (None, None, ""),
                Need::Nvrtc => (
                    autopcg_gpu::testing::Needs::Nvrtc.missing(),
                    None,
                    "AUTOPCG_REQUIRE_GPU",
                ),
                Need::Tool { what, find } => match selected.then(find).flatten() {
                    Some(t) => (None, Some(t), REQUIRE_TOOLS_ENV),
                    None if selected => (Some(format!("no {what}")), None, REQUIRE_TOOLS_ENV),
                    // Not run: no need to look for the tool.
                    None => (None, None, REQUIRE_TOOLS_ENV),
                },
            };
            let required = !env.is_empty() && env_is_1(env);
            let ignored = missing.is_some() && !required;
            if let (true, false, Some(why)) = (ignored, args.list, &missing) {
                eprintln!(
                    "note: test {} ignored: {why}; set {env}=1 to fail instead",
                    c.name
                );
            }
            let body = c.body;
            Trial::ignorable_test(c.name, move || {
                if let Some(why) = missing {
                    return if required {
                        Err(format!("{env}=1 but {why}").into())
                    } else {
                        Ok(Completion::ignored_with(why))
                    };
                }
                match (body, tool) {
                    (Body::Plain(f), _) => f(),
                    (Body::WithTool(f), Some(t)) => f(&t),
                    (Body::WithTool(_), None) => {
                        return Err("the tool was not looked for (filtered out)".into())
                    }
                }
                Ok(Completion::Completed)
            })
            .with_ignored_flag(ignored)
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}
