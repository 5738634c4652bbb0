//! One module per subcommand: each takes its arguments, does the work, prints.

pub(crate) mod providers;
