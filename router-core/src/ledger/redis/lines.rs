//! The lines of waiting requests on Redis: the line part of an admission's arguments, the
//! wake-up channel, and `leave.lua` (see `lua/common.lua`'s lines and `ledger/line.rs`).

use redis::ScriptInvocation;

use super::{LEAVE, RedisStore};
use crate::config::DeploymentId;
use crate::ledger::{LedgerError, Need};

impl RedisStore {
    /// The line part of admit.lua's KEYS and ARGV: each candidate's line keys, the ticket, its
    /// handicap and TTL, whether it joins, and the wake-up channel.
    pub(super) fn push_lines(
        &self,
        inv: &mut ScriptInvocation<'_>,
        need: &Need,
        candidates: &[DeploymentId],
    ) {
        for &d in candidates {
            let keys = &self.scope_keys[d.0];
            inv.key(&keys.line).key(&keys.line_expiry);
        }
        let member = match need.line {
            Some(t) => ticket_member(t.id, t.batch),
            None => ticket_member(need.id, false),
        };
        inv.arg(member);
        match need.line {
            Some(t) => {
                inv.arg(t.handicap_ms)
                    .arg(t.ttl_ms)
                    .arg(if t.join { "j" } else { "n" });
            }
            None => {
                inv.arg(0).arg(0).arg("");
            }
        }
        inv.arg(self.wake_channel());
    }

    /// The channel settle.lua, admit.lua and leave.lua publish wake-ups on (see `wakes.rs`).
    pub(crate) fn wake_channel(&self) -> String {
        format!("{}:wake", self.prefix)
    }

    pub(super) async fn leave_inner(
        &self,
        ticket: u64,
        ds: &[DeploymentId],
    ) -> Result<(), LedgerError> {
        let mut inv = LEAVE.prepare_invoke();
        for &d in ds {
            self.scopes(d)?;
            let keys = &self.scope_keys[d.0];
            inv.key(&keys.line).key(&keys.line_expiry);
        }
        inv.arg(self.now_arg())
            .arg(format!("{ticket:016x}"))
            .arg(self.wake_channel());
        self.run(&inv).await.map(|_| ())
    }
}

/// A ticket as a line's member: 16 hex digits, so that members of equal rank sort as the ids
/// do as numbers, then its class: `b` for a batch request's, `i` for an interactive one's.
pub(crate) fn ticket_member(ticket: u64, batch: bool) -> String {
    format!("{ticket:016x}{}", if batch { 'b' } else { 'i' })
}

/// The ticket of a line's member (as [`ticket_member`] writes it).
pub(crate) fn member_ticket(member: &str) -> Option<u64> {
    u64::from_str_radix(member.get(..16)?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_carries_its_ticket_and_class_and_sorts_as_the_ids_do() {
        assert_eq!(ticket_member(0x2a, true), "000000000000002ab");
        assert_eq!(
            member_ticket(&ticket_member(u64::MAX, false)),
            Some(u64::MAX)
        );
        assert!(ticket_member(9, true) < ticket_member(10, false));
        assert_eq!(member_ticket("zz"), None);
    }
}
