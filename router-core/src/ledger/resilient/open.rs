//! Open mode (`on_error: open`): admitted uncounted while the shared store does not answer.

use super::*;

/// Admits `need` uncounted (open mode), on its first candidate.
pub(super) fn admit_open(
    ids: &mut HashSet<u64>,
    need: &Need,
    candidates: &[DeploymentId],
    now: u64,
) -> Admission {
    let Some(&deployment) = candidates.first() else {
        return Admission::Denied(Denial {
            refusals: Vec::new(),
            place: None,
        });
    };
    ids.insert(need.id);
    let p = crate::ledger::period::periods(now);
    Admission::Granted(Reservation {
        id: need.id,
        deployment,
        bucket: bucket_of(now),
        tokens: need.tokens_on(0),
        input_tokens: need.input_on(0),
        rank: 0,
        tenant: need.tenant.as_ref().map(|t| TenantHold {
            names: t.specs.iter().map(|spec| spec.name.clone()).collect(),
            cost_micros: need.cost(0),
            day: p.day,
            month: p.month,
            windows: Vec::new(),
        }),
    })
}
