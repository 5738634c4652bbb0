//! The `llmroute` binary end to end: output, exit statuses, shared limits across processes, and
//! that no secret is ever printed.
#![allow(clippy::unwrap_used, missing_docs, unreachable_pub)]

mod chaos;
mod chat;
mod embed;
mod errors;
mod keys;
mod logging;
mod providers;
mod quota;
mod reload;
mod secrets;
mod serve;
mod signals;
mod structured;
mod support;
mod traces;
mod usage;
