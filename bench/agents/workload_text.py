"""The sessions' generated content: code-ish text from one seeded pool, sizes, tool schemas."""

import math
import random

WORDS = ("function", "return", "const", "import", "class", "self", "value", "error", "path",
         "config", "test", "assert", "file", "line", "build", "cargo", "router", "request",
         "token", "limit", "window", "cache", "stream", "event", "client", "server", "the",
         "a", "to", "of", "and", "in", "is", "for", "with", "when", "this", "that", "if")

_POOL = []


def text(rng, chars):
    """`chars` characters of code-ish words: a slice of one seeded pool at an offset drawn from
    `rng` (constant time, so building a turn never stalls the event loop)."""
    if not _POOL:
        prng = random.Random("pool")
        _POOL.append(" ".join(prng.choice(WORDS) for _ in range(400_000)))
    pool = _POOL[0]
    chars = max(1, chars)
    reps = chars // (len(pool) - 1) + 1
    if reps > 1:
        return (pool * reps)[:chars]
    off = rng.randrange(len(pool) - chars)
    return pool[off:off + chars]


def log_uniform(rng, lo, hi):
    """An integer in [lo, hi], log-uniform."""
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def schema(rng, props):
    """An input schema: the first property a string, the rest strings or numbers."""
    p = {}
    for i, name in enumerate(props):
        kind = "string" if i == 0 or rng.random() < 0.6 else "number"
        p[name] = {"type": kind, "description": text(rng, rng.randint(20, 100))}
    return {"type": "object", "properties": p, "required": [props[0]],
            "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"}
