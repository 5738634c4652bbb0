//! `llmroute`: the command-line interface to the llmroute router.
//!
//! A thin layer: parse arguments ([`cli`]), load the configuration ([`config`]), open the shared
//! ledger ([`store`]), run a command ([`commands`]), print, and map failures to exit codes
//! ([`failure`]).
#![forbid(unsafe_code)]

mod cli;
mod commands;
mod config;
mod failure;
mod interrupt;
mod logging;
mod pending;
mod store;
mod table;
mod view;

use std::process::ExitCode;

use anyhow::anyhow;
use clap::Parser;
use router_sdk::Router;

use crate::cli::{Cli, Command};
use crate::failure::Failure;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(failure) = logging::init(cli.global.verbose, cli.global.log_format) {
        return failure.report();
    }
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(),
    }
}

fn run(cli: &Cli) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match &cli.command {
        Command::Providers(args) => commands::providers::run(&cli.global, args),
        Command::Simulate(args) => {
            let loaded = config::load(&cli.global)?;
            commands::simulate::run(args, &loaded.registry, &mut out).map_err(|e| {
                match e.downcast_ref::<std::io::Error>() {
                    Some(io) if io.kind() == std::io::ErrorKind::BrokenPipe => {
                        Failure::output(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
                    }
                    _ => Failure::usage(e),
                }
            })
        }
        Command::Completions(args) => {
            commands::completions::run(args, &mut out);
            Ok(())
        }
        Command::Chat(args) => runtime()?.block_on(async {
            let loaded = config::load(&cli.global)?;
            let (ledger, pending) = pending::Tracked::wrap(store::open(&loaded).await?);
            let router = Router::builder(loaded.registry)
                .ledger(ledger)
                .build()
                .await
                .map_err(Failure::router)?;
            let verbose = cli.global.verbose > 0;
            commands::chat::run_until_signal(args, verbose, &router, &pending, &mut out).await
        }),
        Command::Quota(args) => runtime()?.block_on(async {
            let loaded = config::load(&cli.global)?;
            let ledger = store::open(&loaded).await?;
            let state = loaded.ledger.describe();
            commands::quota::run(args, &loaded.registry, &ledger, &state, &mut out).await
        }),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::usage(anyhow!("cannot start the async runtime: {e}")))
}
