//! llmroute core: configuration, the shared limits ledger and its stores, selection, estimation.
//!
//! No HTTP lives here: `router-sdk` adds the provider adapters on top.
#![forbid(unsafe_code)]

pub mod clock;
pub mod config;
pub mod estimate;
pub mod ledger;
pub mod retry;
pub mod select;
pub mod sim;
