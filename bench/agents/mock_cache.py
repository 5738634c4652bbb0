"""Anthropic's prompt cache, as the mock models it.

Prompt caching (5-minute entries, Anthropic's order: tools, then system blocks, then message
blocks; `cache_control` may sit on any of them, at most 4 per request, else 400):
  * the prompt is hashed at every block boundary (cumulatively, each block in a canonical form
    that leaves `cache_control` out, a string content being one text block);
  * at arrival, for each breakpoint, the boundaries up to 20 blocks before it are looked up (the
    longest hit over all breakpoints wins): cache_read_input_tokens are the tokens up to it, and
    its entry's life is renewed;
  * the tokens from there to the last breakpoint are cache_creation_input_tokens, the rest
    input_tokens; each breakpoint after the hit is written, if it is at least 1,024 tokens in
    (Sonnet's minimum), and becomes readable when the answer starts (message_start), as
    Anthropic documents for concurrent requests.
"""

import collections
import hashlib
import time

CACHE_TTL_S = 300.0
CACHE_LOOKBACK = 20
CACHE_MIN_TOKENS = 1024
MAX_BREAKPOINTS = 4


def prefix_hashes(blocks):
    """(hash of the prompt up to each block boundary, tokens up to it, total tokens)."""
    h = hashlib.sha1()
    hashes, cum = [], []
    total = 0
    for key, n, _ in blocks:
        h.update(len(key).to_bytes(4, "little"))
        h.update(key)
        hashes.append(h.digest())
        total += n
        cum.append(total)
    return hashes, cum, total


class PromptCache:
    """The cache's entries (prefix hash -> [tokens, expires (monotonic)]) and its totals."""

    def __init__(self):
        self.entries = {}
        self.stats = collections.Counter()

    def expire(self, now):
        if len(self.entries) > 20000:
            for k in [k for k, v in self.entries.items() if v[1] <= now]:
                del self.entries[k]

    def lookup(self, blocks, now):
        """(read, creation, input, total, pending writes [(hash, tokens)])."""
        hashes, cum, total = prefix_hashes(blocks)
        bps = [i for i, (_, _, bp) in enumerate(blocks) if bp]
        hit = -1
        for b in bps:
            for i in range(b, max(-1, b - CACHE_LOOKBACK), -1):
                if i <= hit:
                    break
                e = self.entries.get(hashes[i])
                if e is not None and e[1] > now:
                    hit = i
                    break
        read = cum[hit] if hit >= 0 else 0
        if hit >= 0:
            self.entries[hashes[hit]][1] = now + CACHE_TTL_S
        writes = [(hashes[b], cum[b]) for b in bps if b > hit and cum[b] >= CACHE_MIN_TOKENS]
        last = max((b for b in bps if cum[b] >= CACHE_MIN_TOKENS), default=-1)
        written_to = cum[last] if last > hit else read
        creation = written_to - read
        return read, creation, total - written_to, total, writes

    def count(self, read, creation, inp):
        """Adds an admitted request's split of its prompt to the totals."""
        self.stats["read"] += read
        self.stats["creation"] += creation
        self.stats["input"] += inp
        self.stats["hits" if read else "misses"] += 1

    def commit(self, writes):
        """Makes a request's pending writes readable (once its answer starts)."""
        for hsh, tok in writes:
            self.entries[hsh] = [tok, time.monotonic() + CACHE_TTL_S]
        self.stats["writes"] += len(writes)
