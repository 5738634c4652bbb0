"""What the mock answers, and when: decided by a hash of the last message's text.

The answer is decided by a hash of the last message's text, so the same conversation gets the
same answers straight and through the gateway: with tools, a tool_use with probability
`--tool-prob`, else text; its real output (thinking + text or tool input) in tokens from the
`--think-tokens`, `--text-tokens`, `--tool-input-tokens` ranges, capped at max_tokens. Timing,
from the same hash: the first event `--ttfb-ms` + U(0, `--ttfb-jitter-ms`) after the request
was read, the rest spread over `--stream-ms` + U(0, `--stream-jitter-ms`) in `--chunks` deltas.
"""

import math
import random

WORDS = ("the", "model", "reads", "file", "and", "then", "edits", "code", "test", "runs",
         "patch", "fix", "build", "error", "line", "function", "value", "check", "path", "data")


def words_text(rng, tokens):
    """About `tokens` tokens of text (4 characters each)."""
    out, n = [], 0
    target = tokens * 4
    while n < target:
        w = rng.choice(WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)[:max(1, target)]


def split(text, n):
    """`text` in `n` (or fewer) consecutive non-empty pieces."""
    n = max(1, min(n, len(text)))
    size = math.ceil(len(text) / n) if text else 1
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def timeline(timing, seed):
    """(seconds to the first event, seconds of the stream after it, deltas) for `seed`."""
    rng = random.Random(seed + b"timing")
    t = timing
    ttfb = (t["ttfb_ms"] + rng.uniform(0, t["ttfb_jitter_ms"])) / 1000
    stream = (t["stream_ms"] + rng.uniform(0, t["stream_jitter_ms"])) / 1000
    return ttfb, stream, max(1, int(t["chunks"]))


def plan(cfg, seed, tools, max_tokens, thinking):
    """(thinking tokens, kind 'tool'|'text', tokens of the text or tool input, tool, rng)."""
    rng = random.Random(seed + b"plan")
    think = rng.randint(*cfg["think"]) if thinking else 0
    if tools and rng.random() < cfg["tool_prob"]:
        kind, n = "tool", rng.randint(*cfg["tool_input"])
        tool = tools[rng.randrange(len(tools))]
    else:
        kind, n, tool = "text", rng.randint(*cfg["text"]), None
    if max_tokens:
        think = min(think, max(0, max_tokens - 1))
        n = max(1, min(n, max_tokens - think))
    return think, kind, n, tool, rng


def tool_input(rng, schema, tokens):
    """A tool call's input: about `tokens` tokens in the schema's first string property."""
    props = (schema or {}).get("properties") or {}
    key = next((k for k, v in props.items() if v.get("type") == "string"), None) or "input"
    return {key: words_text(rng, max(1, tokens - 4))}
