//! `llmroute completions <shell>`: a completion script on stdout.

use std::io::Write;

use clap::{Args, CommandFactory};
use clap_complete::{Generator, Shell};

use crate::cli::Cli;
use crate::context::Context;
use crate::failure::Failure;

/// Options of `llmroute completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for
    shell: Shell,
}

/// Writes the completion script.
pub(crate) async fn run(
    _ctx: &Context<'_>,
    args: &CompletionsArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let mut cli = Cli::command().bin_name("llmroute");
    cli.build();
    // Not `clap_complete::generate`, which panics when the output cannot be written (a closed
    // pipe, a full disk).
    args.shell.try_generate(&cli, out).map_err(Failure::output)
}
