"""The OpenAI account behind chat completions and Responses: its limits (RPM, TPM), headers, plan.

TPM counts the prompt plus max_tokens (or `--chat-output-cap` without) at arrival; a request
that does not fit gets 429 with `retry-after`, `retry-after-ms` and the x-ratelimit-* headers.
"""

import asyncio
import hashlib
import math
import time

from mock_answers import plan
from mock_http import send_json


def text_of(content):
    """The text of an OpenAI content (a string or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def openai_headers(args, fam, now):
    """The x-ratelimit-* headers of account `fam` now (none with --no-ratelimit-headers)."""
    if args.no_ratelimit_headers:
        return []
    used = fam.used(now)
    out = []
    for dim, name in (("rpm", "requests"), ("tpm", "tokens")):
        limit = fam.limits.get(dim)
        if limit:
            reset = fam.lim[dim].reset_in(now)
            out += [(f"x-ratelimit-limit-{name}", limit),
                    (f"x-ratelimit-remaining-{name}", max(0, limit - used[dim])),
                    (f"x-ratelimit-reset-{name}", f"{reset:.3f}s")]
    return out


async def openai_admit(mock, endpoint, prompt, max_tokens, headers, writer, t0, nbytes):
    """Admits (returns the log entry) or answers 429 (returns None)."""
    fam = mock.openai
    now = time.monotonic()
    fam.requests += 1
    cap = max_tokens or mock.args.chat_output_cap
    need = {"rpm": 1, "tpm": prompt + cap}
    ok, wait, refused = fam.check(now, need)
    entry = {"t": time.time(), "endpoint": endpoint, "bench_id": headers.get("x-bench-id", ""),
             "bytes": nbytes, "prompt_tokens": prompt, "max_tokens": cap, "need": need,
             "window_before": fam.used(now)}
    if not ok:
        await refuse(mock, fam, entry, wait, refused, writer, t0, now)
        return None
    fam.admit(now, need)
    fam.whole_prompt.add(now, prompt)
    fam.admitted += 1
    fam.tokens.update({"prompt": prompt, "max_tokens": cap})
    return mock.record(entry)


async def refuse(mock, fam, entry, wait, refused, writer, t0, now):
    """429 rate_limit_exceeded, logged."""
    for d in refused:
        fam.rejected[d] += 1
    retry = 60.0 if wait == math.inf else wait
    kind = "requests" if refused[0] == "rpm" else "tokens"
    hdrs = [("retry-after", max(1, math.ceil(retry))),
            ("retry-after-ms", int(retry * 1000))] + openai_headers(mock.args, fam, now)
    mock.record(dict(entry, status=429, reason=",".join(refused),
                     retry_after_s=round(retry, 3),
                     service_ms=round((time.monotonic() - t0) * 1000, 3)))
    await send_json(writer, 429, {"error": {
        "message": f"Rate limit reached on {kind} per min. Please try again in "
                   f"{retry:.3f}s.", "type": kind, "param": None,
        "code": "rate_limit_exceeded"}}, hdrs)


def openai_plan(mock, last_text, tools, max_tokens):
    """(seed, kind, tokens, tool {name, input_schema}, rng) for the answer."""
    seed = hashlib.sha1(last_text.encode()).digest()
    flat = []
    for t in tools or []:
        fn = t.get("function", t)
        if t.get("type", "function") == "function" and fn.get("name"):
            flat.append({"name": fn["name"], "input_schema": fn.get("parameters")})
    _, kind, n, tool, rng = plan(mock.plan_cfg, seed, flat, max_tokens, False)
    return seed, kind, n, tool, rng


async def spread(writer, events, stream_s):
    """Writes `events` evenly over `stream_s` seconds."""
    t_s = time.monotonic()
    for i, e in enumerate(events):
        writer.write(e)
        await writer.drain()
        due = t_s + stream_s * (i + 1) / (len(events) + 1)
        await asyncio.sleep(max(0.0, due - time.monotonic()))
    await asyncio.sleep(max(0.0, t_s + stream_s - time.monotonic()))
