//! The line of requests waiting for one deployment, shared by every instance.
//!
//! A request that finds every candidate full takes a [`Ticket`](super::Ticket) in the line of
//! each deployment it waits for. Its place is its *rank*: the store's time when it first
//! joined, plus its class's handicap (0 for interactive requests, `priorities.batch_pass_ms`
//! for batch ones). Lines are ordered by rank, then by ticket id. A deployment admits a request
//! only when no live ticket ranks before it: a newcomer ranks at the store's time now, so it
//! never passes a request already waiting, and a batch ticket is passed only by interactive
//! requests that arrive within its handicap of it (the aging bound).
//!
//! A ticket lives `ttl` past the last admission that carried it, so a waiter whose instance
//! died leaves the line by itself. It leaves at once when admitted, when its request gives up
//! or is dropped ([`Ledger::leave`](super::Ledger::leave)), and when its own tenant's or key's
//! limits refuse it (it then waits for its account, not for the deployment, and must not hold
//! others up).
//!
//! Twin: the line part of `lua/admit.lua` (a sorted set by rank and one by expiry per line).

use std::time::Duration;

use super::LedgerError;
use super::engine::{Cells, Engine};
use super::types::{LimitKind, Need, Refusal, Scope, Verdict};
use crate::config::DeploymentId;

/// One waiting request's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) ticket: u64,
    pub(crate) rank: u64,
    pub(crate) expiry: u64,
    /// Whether it is a batch request's.
    pub(crate) batch: bool,
}

/// The tickets waiting for one deployment, by rank then ticket id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Line {
    entries: Vec<Entry>,
}

impl Line {
    /// The line of `entries` (any order).
    pub(crate) fn from_entries(mut entries: Vec<Entry>) -> Self {
        entries.sort_by_key(|e| (e.rank, e.ticket));
        Self { entries }
    }

    /// Every entry, first in line first.
    pub(crate) fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Drops the tickets that expired by `now`; returns whether any did.
    pub(crate) fn purge(&mut self, now: u64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.expiry > now);
        self.entries.len() != before
    }

    /// The rank of `ticket`, if it is in line.
    pub(crate) fn rank_of(&self, ticket: u64) -> Option<u64> {
        self.entries
            .iter()
            .find(|e| e.ticket == ticket)
            .map(|e| e.rank)
    }

    /// How many tickets stand before a request of `ticket`: its own place when it is in line,
    /// else every ticket of `rank` or less (it arrived after them).
    pub(crate) fn ahead(&self, ticket: u64, rank: u64) -> u64 {
        let before = match self.rank_of(ticket) {
            Some(own) => self
                .entries
                .iter()
                .filter(|e| (e.rank, e.ticket) < (own, ticket))
                .count(),
            None => self.entries.iter().filter(|e| e.rank <= rank).count(),
        };
        before as u64
    }

    /// Puts `ticket` (a batch request's, or not) in line at `rank` (among tickets of the same
    /// rank, which arrived in the same millisecond, by id), or keeps its place and moves its
    /// expiry.
    pub(crate) fn join(&mut self, ticket: u64, rank: u64, expiry: u64, batch: bool) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.ticket == ticket) {
            e.expiry = expiry;
            return;
        }
        let at = self
            .entries
            .partition_point(|e| (e.rank, e.ticket) < (rank, ticket));
        self.entries.insert(
            at,
            Entry {
                ticket,
                rank,
                expiry,
                batch,
            },
        );
    }

    /// Takes `ticket` out of line; returns whether it was in it.
    pub(crate) fn leave(&mut self, ticket: u64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.ticket != ticket);
        self.entries.len() != before
    }

    /// How many batch requests' tickets are in line.
    pub(crate) fn batch_count(&self) -> u64 {
        self.entries.iter().filter(|e| e.batch).count() as u64
    }

    /// The rank of the first ticket in line.
    pub(crate) fn first_rank(&self) -> Option<u64> {
        self.entries.first().map(|e| e.rank)
    }

    /// The first ticket in line.
    pub(crate) fn head(&self) -> Option<u64> {
        self.entries.first().map(|e| e.ticket)
    }
}

/// The longest a request in line waits before asking again when no wake-up comes, ms (the
/// denial's "not now" for a line, and the cap on any wait in line). Asking renews its ticket,
/// which lives [`TICKET_TTL_MS`]: a waiter asks at least three times in a ticket's life.
pub const LINE_POLL_MS: u64 = 3_000;

/// How long a ticket stays in line after the last admission that carried it, ms: how long a
/// waiter that died holds the line up, at most.
pub const TICKET_TTL_MS: u64 = 10_000;

/// A request's place, as one admission sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) ticket: u64,
    pub(crate) rank: u64,
    /// Whether it holds a ticket in some candidate's line.
    pub(crate) inside: bool,
}

impl Engine<'_> {
    /// The place of `need` among `candidates`' lines (expired tickets dropped first): its
    /// ticket's rank where it is in line, else now plus its class's handicap (a newcomer).
    pub(crate) fn place(
        &self,
        cells: &mut impl Cells,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Place {
        let ticket = need.line.map_or(need.id, |t| t.id);
        let mut found = None;
        for &d in candidates {
            let line = &mut cells.scope(d.0).line;
            line.purge(self.now);
            found = found.or(line.rank_of(ticket));
        }
        let handicap = need.line.map_or(0, |t| t.handicap_ms);
        Place {
            ticket,
            rank: found.unwrap_or(self.now.saturating_add(handicap)),
            inside: found.is_some(),
        }
    }

    /// The refusal of `d` when requests stand before `place` in its line.
    pub(crate) fn line_refusal(
        &self,
        cells: &mut impl Cells,
        place: Place,
        d: DeploymentId,
    ) -> Option<Refusal> {
        let ahead = cells.scope(d.0).line.ahead(place.ticket, place.rank);
        (ahead > 0).then(|| Refusal {
            deployment: d,
            limit: LimitKind::Line,
            scope: Scope::Deployment,
            verdict: Verdict::NotNow(Duration::from_millis(LINE_POLL_MS)),
        })
    }

    /// The request at `place` was admitted on `granted`: its ticket leaves every line, and
    /// whoever is first in `granted`'s line now is woken (there may be room for it too).
    pub(crate) fn admitted_from_line(
        &self,
        cells: &mut impl Cells,
        place: Place,
        candidates: &[DeploymentId],
        granted: DeploymentId,
    ) {
        if !place.inside {
            return;
        }
        for &d in candidates {
            cells.scope(d.0).line.leave(place.ticket);
        }
        self.wake_first(cells, granted);
    }

    /// After a denial: the ticket joins (or keeps its place in) the line of every candidate
    /// that refused for its own capacity, and leaves those that refused for the request's
    /// accounts, its size or a budget. Returns how many stand before it in the shortest line
    /// it is in.
    pub(crate) fn after_denial(
        &self,
        cells: &mut impl Cells,
        need: &Need,
        place: Place,
        refusals: &[Refusal],
    ) -> Option<u64> {
        let ticket = need.line?;
        let expiry = self.now.saturating_add(ticket.ttl_ms);
        let mut shortest: Option<u64> = None;
        for r in refusals {
            let waits = ticket.join
                && matches!(r.verdict, Verdict::NotNow(_))
                && matches!(r.scope, Scope::Deployment | Scope::Provider);
            let line = &mut cells.scope(r.deployment.0).line;
            if waits {
                line.join(place.ticket, place.rank, expiry, ticket.batch);
                let ahead = line.ahead(place.ticket, place.rank);
                shortest = Some(shortest.map_or(ahead, |s| s.min(ahead)));
            } else {
                line.leave(place.ticket);
            }
        }
        shortest
    }

    /// Takes `ticket` out of the lines of `deployments`; wakes whoever is first in a line it
    /// was first in.
    ///
    /// Twin: `lua/leave.lua`.
    pub(crate) fn leave(
        &self,
        cells: &mut impl Cells,
        ticket: u64,
        deployments: &[DeploymentId],
    ) -> Result<(), LedgerError> {
        for &d in deployments {
            self.table
                .of(d)
                .ok_or(LedgerError::UnknownDeployment(d.0))?;
            let line = &mut cells.scope(d.0).line;
            let first = line.head() == Some(ticket);
            if line.leave(ticket) && first {
                self.wake_first(cells, d);
            }
        }
        Ok(())
    }

    /// Wakes the first live ticket in `d`'s line, if any.
    pub(crate) fn wake_first(&self, cells: &mut impl Cells, d: DeploymentId) {
        let line = &mut cells.scope(d.0).line;
        line.purge(self.now);
        if let Some(head) = line.head() {
            cells.wake(head);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_keeps_rank_order_and_a_newcomer_stands_behind_equal_ranks() {
        let mut line = Line::default();
        line.join(7, 100, 1_000, false);
        // The same millisecond: by id.
        line.join(3, 100, 1_000, false);
        line.join(9, 50, 1_000, false);
        assert_eq!(
            line.entries().iter().map(|e| e.ticket).collect::<Vec<_>>(),
            [9, 3, 7]
        );
        // In line: its own place, whatever rank it is asked with.
        assert_eq!(line.ahead(9, 0), 0);
        assert_eq!(line.ahead(3, 0), 1);
        assert_eq!(line.ahead(7, 0), 2);
        // Not in line, at rank 100: behind all three, though its id is the lowest.
        assert_eq!(line.ahead(1, 100), 3);
        assert_eq!(line.ahead(1, 99), 1);
    }

    #[test]
    fn joining_again_keeps_the_place_and_moves_the_expiry() {
        let mut line = Line::default();
        line.join(1, 10, 100, false);
        line.join(2, 20, 100, false);
        line.join(1, 30, 500, false);
        assert_eq!(line.rank_of(1), Some(10));
        assert_eq!(line.head(), Some(1));
        assert!(line.purge(200));
        assert_eq!(line.entries().len(), 1);
        assert_eq!(line.head(), Some(1));
        assert!(line.leave(1));
        assert!(!line.leave(1));
        assert_eq!(line.head(), None);
    }
}
