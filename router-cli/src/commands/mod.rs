//! One module per subcommand, each with the same entry point:
//! `async fn run(ctx: &Context<'_>, args: &XArgs, out: &mut dyn Write) -> Result<(), Failure>`:
//! it takes the global context and its own arguments, does the work, and prints on `out`.

pub(crate) mod chat;
pub(crate) mod completions;
pub(crate) mod embed;
pub(crate) mod keys;
pub(crate) mod providers;
pub(crate) mod quota;
pub(crate) mod serve;
pub(crate) mod simulate;
pub(crate) mod usage;
