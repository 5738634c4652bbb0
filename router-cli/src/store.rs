//! Opening the ledger the configuration selects (the choice itself is the SDK's:
//! [`router_sdk::store`]), with a hint on what to fix when it cannot be opened.

use std::sync::Arc;

use anyhow::anyhow;
use router_core::ledger::Ledger;
use router_sdk::store::{ChoiceOrigin, LedgerChoice};

use crate::config::Loaded;
use crate::failure::Failure;

/// Opens the ledger of `loaded`: exit status 5 when it is unavailable.
pub(crate) async fn open(loaded: &Loaded) -> Result<Arc<dyn Ledger>, Failure> {
    router_sdk::store::open(&loaded.ledger, &loaded.registry)
        .await
        .map_err(|e| match &loaded.ledger {
            LedgerChoice::Redis { from, .. } => {
                Failure::state(anyhow!("{e}; start Redis there, or fix {}", fix(from)))
            }
            _ => Failure::state(e),
        })
}

/// What to fix for a Redis URL from `from`.
fn fix(from: &ChoiceOrigin) -> String {
    match from {
        ChoiceOrigin::Config => "`state` in the configuration file".to_owned(),
        other => other.as_str().to_owned(),
    }
}
