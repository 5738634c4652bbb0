//! `llmroute`: the command-line interface to the llmroute router.
//!
//! A thin layer: parse arguments ([`cli`]), set up logging ([`logging`]), run a command
//! ([`commands`]) with its [`context`] (which loads the configuration and opens the ledger the
//! SDK chooses), print, and map failures to exit codes ([`failure`]).
#![forbid(unsafe_code)]

mod cli;
mod commands;
mod config;
mod context;
mod failure;
mod flags;
mod interrupt;
mod logging;
mod store;
mod table;
mod view;

use std::io::Write;
use std::process::ExitCode;

use anyhow::anyhow;
use clap::Parser;

use crate::cli::{Cli, Command};
use crate::context::Context;
use crate::failure::Failure;

/// mimalloc rather than the system's allocator: less CPU per request, less memory held.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    let ctx = Context::new(&cli.global);
    let mut out = std::io::stdout().lock();
    let out: &mut dyn Write = &mut out;
    runtime(&cli.command)?.block_on(async {
        match &cli.command {
            Command::Providers(args) => commands::providers::run(&ctx, args, out).await,
            Command::Chat(args) => commands::chat::run(&ctx, args, out).await,
            Command::Embed(args) => commands::embed::run(&ctx, args, out).await,
            Command::Quota(args) => commands::quota::run(&ctx, args, out).await,
            Command::Usage(args) => commands::usage::run(&ctx, args, out).await,
            Command::Simulate(args) => commands::simulate::run(&ctx, args, out).await,
            Command::Serve(args) => commands::serve::run(&ctx, args, out).await,
            Command::Keys(args) => commands::keys::run(&ctx, args, out).await,
            Command::Completions(args) => commands::completions::run(&ctx, args, out).await,
        }
    })
}

/// The runtime a command runs on: `serve` gets one worker thread per core (or `--workers`),
/// so that the gateway uses every core it is given; one-shot commands run on one thread.
fn runtime(command: &Command) -> Result<tokio::runtime::Runtime, Failure> {
    let mut builder = match command {
        Command::Serve(args) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            if let Some(n) = args.workers {
                b.worker_threads(n.get());
            }
            b
        }
        _ => tokio::runtime::Builder::new_current_thread(),
    };
    builder
        .enable_all()
        .build()
        .map_err(|e| Failure::usage(anyhow!("cannot start the async runtime: {e}")))
}
