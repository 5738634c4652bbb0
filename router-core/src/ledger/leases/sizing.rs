//! How big a block to ask for.

use super::*;
use crate::config::Lease;
use crate::ledger::redis::lease::Ask;

impl Leases {
    /// How much of a deployment to lease for a request of `tokens` on it (the [`Ask`]), and
    /// for how long (s), at `now`, with `instances` live. Tokens are leased only where a token
    /// limit applies (`tokens_limited`); there a block holds at least one.
    ///
    /// `auto` asks for [`Lease::AUTO_SECS`] of this instance's leased rate over the last ten
    /// seconds (plus this request), and at most half of its share of what is left of each limit
    /// (`parts`: twice the live instances), so that blocks shrink as the deployment fills and
    /// its last room goes where the requests need it, a request at a time. A fixed block takes
    /// what is left, up to its size.
    pub(crate) fn size(
        &mut self,
        spec: Lease,
        tokens: u64,
        tokens_limited: bool,
        instances: u64,
        now: u64,
    ) -> (Ask, u64) {
        let (want, parts, secs) = match spec {
            Lease::Block {
                requests,
                tokens: block_tokens,
                secs,
            } => {
                let block_tokens = if block_tokens == u64::MAX {
                    requests.saturating_mul(tokens)
                } else {
                    block_tokens
                };
                ((requests, block_tokens), 1, secs)
            }
            Lease::Auto => {
                // The instance's whole leased rate, not one deployment's: when a cheaper
                // deployment fills up, its traffic moves to this one at once.
                let (recent, mean) = self.rate(now);
                let requests = (recent * Lease::AUTO_SECS).div_ceil(10) + 1;
                let block_tokens = requests.saturating_mul(mean.max(tokens));
                let parts = 2 * instances.max(1);
                ((requests, block_tokens), parts, Lease::AUTO_SECS)
            }
        };
        let (want_tokens, least_tokens) = if tokens_limited {
            (want.1.max(1), tokens)
        } else {
            (0, 0)
        };
        let ask = Ask {
            want: (want.0, want_tokens),
            least: (1, least_tokens),
            parts,
        };
        (ask, secs)
    }
}
