//! Test helper: one OS process hammering a shared SQLite ledger, for the multi-process test.
//!
//! `ledger-hammer <ledger.db> <config.yaml> <model> <tokens> <attempts> <now-ms>`
//!
//! Opens the ledger, prints `ready`, waits for a line on standard input (so that every process
//! starts together), then tries `attempts` admissions of `tokens` on `model` with the clock
//! fixed at `now-ms` (all processes agree on the time, so the expected count is exact), keeps
//! every reservation, and prints the number granted.
#![forbid(unsafe_code)]

use std::error::Error;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use router_core::clock::ManualClock;
use router_core::config::Registry;
use router_core::ledger::{Admission, Ledger, Need, SqliteStore};

const USAGE: &str =
    "usage: ledger-hammer <ledger.db> <config.yaml> <model> <tokens> <attempts> <now-ms>";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ledger-hammer: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [db, config, model, tokens, attempts, now] = args.as_slice() else {
        return Err(USAGE.into());
    };
    let (tokens, attempts, now): (u64, usize, u64) =
        (tokens.parse()?, attempts.parse()?, now.parse()?);
    let registry = Registry::from_yaml_str(&std::fs::read_to_string(config)?, config)?;
    let candidates = registry.resolve(model);
    if candidates.is_empty() {
        return Err(format!("no deployment serves {model}").into());
    }
    let clock = Arc::new(ManualClock::new(now));
    let store = SqliteStore::open(&PathBuf::from(db), &registry, clock)?;

    println!("ready");
    std::io::stdout().flush()?;
    std::io::stdin().lock().read_line(&mut String::new())?;

    let need = Need::new(tokens, Duration::from_secs(600));
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let granted = runtime.block_on(async {
        let mut granted = 0usize;
        for _ in 0..attempts {
            let need = need.clone().with_new_id();
            if let Admission::Granted(_kept) = store.admit(&need, &candidates).await? {
                granted += 1;
            }
        }
        Ok::<_, Box<dyn Error>>(granted)
    })?;
    println!("{granted}");
    Ok(())
}
