//! Prints a ledger script as llmroute loads it into Redis (constants, prelude, helpers, body),
//! for tools that measure it there (`bench/admit_cost.sh`).
//!
//! ```sh
//! cargo run -q -p router-core --example lua_script -- admit
//! ```

use std::process::ExitCode;

fn main() -> ExitCode {
    let name = std::env::args().nth(1).unwrap_or_default();
    match router_core::ledger::script_text(&name) {
        Some(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        None => {
            eprintln!(
                "lua_script: no ledger script named '{name}'; give a file of lua/ without \
                 `.lua`, e.g. admit"
            );
            ExitCode::from(2)
        }
    }
}
