//! `llmroute completions <shell>`: a completion script on stdout.

use std::io::Write;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

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
    clap_complete::generate(args.shell, &mut Cli::command(), "llmroute", out);
    Ok(())
}
