//! What each deployment's provider holds in its prompt cache, as far as this router has seen.
//!
//! A conversation's next turn starts with the prompt of the last one: an agent sends its
//! system prompt, tools and history again, and the provider reads them from its cache. When a
//! request settles, the tokens its provider reported read from the cache are recorded under
//! the prompt's prefix up to its last cache breakpoint. A later request to the same deployment
//! whose prompt starts with that prefix is expected to read at least as many: admission
//! leaves them out of what a limiter that does not count cache reads (Anthropic's ITPM) is
//! reserved, and ranking and budgets price them at the cached-input price.
//!
//! Prefixes are named by a hash of their content ([`PrefixHashes`]): nothing of a prompt is
//! kept. An entry lives for [`LIFETIME_MS`], within the shortest time providers keep a cache
//! entry they have just read (Anthropic: 5 minutes), and the table holds at most [`CAPACITY`]
//! entries, the oldest going first.

use std::collections::HashMap;
use std::hash::Hasher;

use rustc_hash::FxHasher;

use crate::config::DeploymentId;

/// How long a recorded prefix is expected to stay in its provider's cache: 4 minutes, a minute
/// inside the 5 minutes Anthropic keeps an entry after its last read.
pub const LIFETIME_MS: u64 = 240_000;

/// The most prefixes remembered.
pub const CAPACITY: usize = 4096;

/// The hashes of a prompt's prefixes, one at the end of each of its parts (tools, then each
/// message), each covering everything before it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrefixHashes {
    /// The hash at the end of each part, in order.
    pub ends: Vec<u64>,
    /// The index in `ends` of the last cache breakpoint, if the prompt marks one.
    pub breakpoint: Option<usize>,
}

/// Builds [`PrefixHashes`] part by part.
#[derive(Default)]
pub struct PrefixHasher {
    hasher: FxHasher,
    hashes: PrefixHashes,
}

impl std::fmt::Debug for PrefixHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixHasher")
            .field("hashes", &self.hashes)
            .finish_non_exhaustive()
    }
}

impl PrefixHasher {
    /// Adds `bytes` to the part being hashed.
    pub fn write(&mut self, bytes: &[u8]) {
        self.hasher.write(bytes);
        // A separator, so that ("ab", "c") and ("a", "bc") differ.
        self.hasher.write_u8(0xff);
    }

    /// Ends a part; `breakpoint`: the caller marked its end for caching.
    pub fn end_part(&mut self, breakpoint: bool) {
        if breakpoint {
            self.hashes.breakpoint = Some(self.hashes.ends.len());
        }
        self.hashes.ends.push(self.hasher.finish());
    }

    /// The hashes of the parts ended so far.
    pub fn finish(self) -> PrefixHashes {
        self.hashes
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    tokens: u64,
    until_ms: u64,
}

/// Each deployment's recently cached prefixes and the tokens read from them.
#[derive(Debug, Default)]
pub struct PromptCache {
    entries: HashMap<(DeploymentId, u64), Entry>,
}

impl PromptCache {
    /// The tokens `d`'s provider is expected to read from its cache for a prompt of
    /// `prefixes`: those recorded for its longest prefix still alive at `now_ms`; 0 if none.
    pub fn expected(&self, d: DeploymentId, prefixes: &PrefixHashes, now_ms: u64) -> u64 {
        if self.entries.is_empty() {
            return 0;
        }
        prefixes
            .ends
            .iter()
            .rev()
            .find_map(|&hash| {
                let entry = self.entries.get(&(d, hash))?;
                (entry.until_ms > now_ms).then_some(entry.tokens)
            })
            .unwrap_or(0)
    }

    /// Records that `d`'s provider read `tokens` from its cache for a prompt of `prefixes` at
    /// `now_ms`: they are expected again for its prefix up to its last breakpoint (a prompt
    /// without one records nothing).
    pub fn record(&mut self, d: DeploymentId, prefixes: &PrefixHashes, tokens: u64, now_ms: u64) {
        let Some(at) = prefixes.breakpoint else {
            return;
        };
        let Some(&hash) = prefixes.ends.get(at) else {
            return;
        };
        if tokens == 0 {
            self.entries.remove(&(d, hash));
            return;
        }
        if self.entries.len() >= CAPACITY {
            self.evict(now_ms);
        }
        let until_ms = now_ms.saturating_add(LIFETIME_MS);
        self.entries.insert((d, hash), Entry { tokens, until_ms });
    }

    /// Drops the entries that have expired, and when none has, the oldest.
    fn evict(&mut self, now_ms: u64) {
        self.entries.retain(|_, e| e.until_ms > now_ms);
        if self.entries.len() >= CAPACITY
            && let Some(&oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.until_ms)
                .map(|(key, _)| key)
        {
            self.entries.remove(&oldest);
        }
    }

    /// How many prefixes are remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hashes of a prompt of `parts`, with a breakpoint after part `breakpoint`.
    fn hashes(parts: &[&str], breakpoint: Option<usize>) -> PrefixHashes {
        let mut h = PrefixHasher::default();
        for (i, part) in parts.iter().enumerate() {
            h.write(part.as_bytes());
            h.end_part(breakpoint == Some(i));
        }
        h.finish()
    }

    #[test]
    fn the_next_turn_expects_what_the_last_read_under_its_breakpoint() {
        let d = DeploymentId(0);
        let mut cache = PromptCache::default();
        let turn = hashes(&["tools", "system", "ask"], Some(2));
        cache.record(d, &turn, 20_000, 1_000);
        // The next turn starts with the same three parts and adds two: its longest known prefix.
        let next = hashes(&["tools", "system", "ask", "call", "result"], Some(4));
        assert_eq!(cache.expected(d, &next, 2_000), 20_000);
        // Another deployment's cache, a changed history, or a lapsed entry: nothing expected.
        assert_eq!(cache.expected(DeploymentId(1), &next, 2_000), 0);
        let changed = hashes(&["tools", "system", "ASK", "call"], Some(3));
        assert_eq!(cache.expected(d, &changed, 2_000), 0);
        assert_eq!(cache.expected(d, &next, 1_000 + LIFETIME_MS), 0);
        // Parts are separated: the same bytes cut elsewhere are another prompt.
        let recut = hashes(&["toolssystem", "ask"], None);
        assert_eq!(cache.expected(d, &recut, 2_000), 0);
    }

    #[test]
    fn no_breakpoint_records_nothing_and_a_miss_forgets_the_prefix() {
        let d = DeploymentId(0);
        let mut cache = PromptCache::default();
        cache.record(d, &hashes(&["a", "b"], None), 500, 0);
        assert!(cache.is_empty());
        let turn = hashes(&["a", "b"], Some(1));
        cache.record(d, &turn, 500, 0);
        assert_eq!(cache.expected(d, &turn, 1), 500);
        cache.record(d, &turn, 0, 2);
        assert_eq!(cache.expected(d, &turn, 3), 0);
    }

    #[test]
    fn a_full_table_drops_the_expired_then_the_oldest() {
        let d = DeploymentId(0);
        let mut cache = PromptCache::default();
        let one = |i: usize| hashes(&[&i.to_string()], Some(0));
        for i in 0..CAPACITY {
            cache.record(d, &one(i), 10, i as u64);
        }
        cache.record(d, &one(CAPACITY), 10, CAPACITY as u64);
        assert_eq!(cache.len(), CAPACITY);
        assert_eq!(
            cache.expected(d, &one(0), CAPACITY as u64),
            0,
            "the oldest went"
        );
        assert_eq!(cache.expected(d, &one(1), CAPACITY as u64), 10);
    }
}
