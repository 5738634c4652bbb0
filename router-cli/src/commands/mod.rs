//! One module per subcommand: each takes its arguments, does the work, prints.

pub(crate) mod chat;
pub(crate) mod completions;
pub(crate) mod providers;
pub(crate) mod quota;
pub(crate) mod simulate;
