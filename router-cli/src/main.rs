//! `llmroute`: the command-line interface to the llmroute router.
//!
//! A thin layer: parse arguments ([`cli`]), load the configuration ([`config`]), run a command
//! ([`commands`]), print, and map failures to exit codes ([`failure`]).
#![forbid(unsafe_code)]

mod cli;
mod commands;
mod config;
mod failure;
mod view;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::failure::Failure;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(),
    }
}

fn run(cli: &Cli) -> Result<(), Failure> {
    match &cli.command {
        Command::Providers(args) => commands::providers::run(&cli.global, args),
    }
}
