//! Each tenant's and key's requests this UTC day, from the usage records: what the tenants and
//! keys lists show beside their limits.

use router_usage::AccountCount;
use serde::Serialize;

use super::read_failed;
use crate::app::Shared;
use crate::errors::ApiError;

/// Requests this UTC day.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(super) struct Today {
    /// Requests, whatever their outcome.
    requests: u64,
    /// Of which the caller got a 429 for: no capacity, a provider's 429, or a budget.
    limited: u64,
}

/// This UTC day's counts per tenant and key; `None` when the gateway keeps no usage records.
pub(super) async fn counts(shared: &Shared) -> Result<Option<Vec<AccountCount>>, ApiError> {
    let Some(recorder) = shared.router.usage() else {
        return Ok(None);
    };
    let now = shared.router.now_ms();
    let day = router_core::ledger::calendar::DAY;
    let since = now - now % day;
    let counts = recorder.sink().by_account(since, since + day).await;
    let counts = counts.map_err(read_failed)?;
    Ok(Some(counts))
}

/// Of `counts`, those `pick` takes, summed.
pub(super) fn sum(counts: &[AccountCount], pick: impl Fn(&AccountCount) -> bool) -> Today {
    counts
        .iter()
        .filter(|c| pick(c))
        .fold(Today::default(), |t, c| Today {
            requests: t.requests + c.requests,
            limited: t.limited + c.limited,
        })
}
