"""POST /v1/messages: Anthropic's checks, rate limits and prompt cache, then the answer.

Anthropic rate limits (ITPM / OTPM / RPM), checked when a request arrives:
  * RPM counts 1 per request.
  * ITPM counts the request's uncached input: input_tokens + cache_creation_input_tokens. Cache
    reads do not count (current models).
  * OTPM counts `max_tokens` at arrival, and is corrected to the real output when the answer
    ends (just before `message_stop` is written).
  * A request that does not fit under every limit gets 429 `rate_limit_error` with
    `retry-after` (whole seconds until it would fit) and the `anthropic-ratelimit-*` headers.
    Every answer carries those headers too: `-requests-`, `-input-tokens-`, `-output-tokens-`
    and `-tokens-` (the more restrictive of input and output) `limit`, `remaining` (token counts
    rounded down to thousands, as Anthropic does; `--exact-remaining` to turn that off) and
    `reset` (RFC 3339: when the limit is fully replenished).
The window or bucket behind them: mock_limits.py; the cache: mock_cache.py; the answer and its
events: mock_messages_sse.py.
"""

import asyncio
import math
import time
from datetime import datetime, timezone

from mock_cache import MAX_BREAKPOINTS
from mock_http import send_json
from mock_messages_sse import compose, send_whole, stream_events
from mock_tokens import anthropic_blocks


async def messages(mock, req, headers, writer, t0, nbytes):
    """The handler: a 400, a 429, or the answer (whole or streamed), logged either way."""
    fam = mock.anthropic
    bench = headers.get("x-bench-id", "")
    entry = {"t": time.time(), "endpoint": "messages", "bench_id": bench, "bytes": nbytes}
    try:
        blocks = validate(mock.args, req)
    except ValueError as e:
        return await refuse_invalid(mock, entry, e, writer, t0)
    now = time.monotonic()
    fam.requests += 1
    mock.cache.expire(now)
    read, creation, inp, total, writes = mock.cache.lookup(blocks, now)
    max_tokens = req["max_tokens"]
    need = {"rpm": 1, "itpm": inp + creation, "otpm": max_tokens}
    ok, wait, refused = fam.check(now, need)
    used = fam.used(now)
    entry.update(input_tokens=inp, cache_creation_input_tokens=creation,
                 cache_read_input_tokens=read, prompt_tokens=total, max_tokens=max_tokens,
                 need=need, window_before=used)
    if not ok:
        return await refuse_rate_limited(mock, fam, entry, wait, refused, writer, t0, now)
    entries = fam.admit(now, need)
    fam.whole_prompt.add(now, total)
    fam.admitted += 1
    mock.cache.count(read, creation, inp)
    hdrs = [("request-id", f"req_mock{mock.seq}"), ("x-mock-seq", mock.seq)]
    hdrs += ratelimit_headers(mock.args, fam, now)
    rec = mock.record(entry)
    message, think, (ttfb, stream_s, chunks) = compose(mock, req, inp, creation, read)
    output, stop = message["usage"]["output_tokens"], message["stop_reason"]
    fam.tokens.update({"input": inp, "cache_creation": creation, "cache_read": read,
                       "output": output, "max_tokens": max_tokens})

    await asyncio.sleep(max(0.0, t0 + ttfb - time.monotonic()))
    mock.cache.commit(writes)          # readable once the answer starts

    def settle():
        fam.lim["otpm"].correct(entries["otpm"], output, time.monotonic())

    if not req.get("stream"):
        t_first = await send_whole(writer, message, hdrs, t0 + ttfb + stream_s, settle)
    else:
        t_first = await stream_events(writer, message, think, chunks, stream_s, hdrs, settle)
    t_end = time.monotonic()
    rec.update(status=200, output_tokens=output, stop_reason=stop,
               stream=bool(req.get("stream")), ttfb_ms=round((t_first - t0) * 1000, 3),
               service_ms=round((t_end - t0) * 1000, 3))


def validate(args, req):
    """The request's blocks (mock_tokens.py), or ValueError as Anthropic would answer 400."""
    if not isinstance(req.get("max_tokens"), int) or req["max_tokens"] < 1:
        raise ValueError("max_tokens: Field required")
    blocks = anthropic_blocks(req, args.tool_overhead_tokens)
    if sum(1 for b in blocks if b[2]) > MAX_BREAKPOINTS:
        raise ValueError("A maximum of 4 blocks with cache_control may be provided.")
    check_turns(req)
    return blocks


def content_of(m):
    """A message's content as a list of blocks."""
    content = m["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def check_turns(req):
    """Anthropic's checks the gateway could break: results answer the last calls; thinking."""
    msgs = req["messages"]
    for i, m in enumerate(msgs):
        results = [b for b in content_of(m) if b.get("type") == "tool_result"]
        if not results:
            continue
        prev = msgs[i - 1] if i else None
        ids = ({b.get("id") for b in content_of(prev)} if prev and prev["role"] == "assistant"
               else set())
        for b in results:
            if b.get("tool_use_id") not in ids:
                raise ValueError(f"messages.{i}: unexpected `tool_use_id` found in "
                                 f"`tool_result` blocks: {b.get('tool_use_id')}. Each "
                                 "`tool_result` block must have a corresponding `tool_use` "
                                 "block in the previous message.")
    check_thinking(req, msgs)


def check_thinking(req, msgs):
    """With thinking enabled: its budget, and the last assistant turn starts with thinking."""
    th = req.get("thinking") or {}
    if th.get("type") != "enabled":
        return
    budget = th.get("budget_tokens") or 0
    if budget < 1024 or budget >= req["max_tokens"]:
        raise ValueError("thinking.budget_tokens: at least 1024 and less than max_tokens")
    last_asst = next((m for m in reversed(msgs) if m["role"] == "assistant"), None)
    if (last_asst is not None and msgs[-1]["role"] == "user"
            and any(b.get("type") == "tool_result" for b in content_of(msgs[-1]))):
        first = content_of(last_asst)[0].get("type")
        if first not in ("thinking", "redacted_thinking"):
            raise ValueError("messages: Expected `thinking` or "
                             "`redacted_thinking`, but found `%s`. When `thinking` is "
                             "enabled, a final `assistant` message must start with a "
                             "thinking block." % first)


async def refuse_invalid(mock, entry, e, writer, t0):
    """400 invalid_request_error, logged."""
    mock.record(dict(entry, status=400, reason=str(e)[:300],
                     service_ms=round((time.monotonic() - t0) * 1000, 3)))
    return await send_json(writer, 400, {"type": "error", "error": {
        "type": "invalid_request_error", "message": str(e)}},
        [("request-id", f"req_mock{mock.seq}")])


async def refuse_rate_limited(mock, fam, entry, wait, refused, writer, t0, now):
    """429 rate_limit_error with retry-after and the rate-limit headers, logged."""
    for d in refused:
        fam.rejected[d] += 1
    retry = 60 if wait == math.inf else max(1, math.ceil(wait))
    hdrs = [("retry-after", retry), ("x-should-retry", "true"),
            ("request-id", f"req_mock{mock.seq}")] + ratelimit_headers(mock.args, fam, now)
    d = refused[0]
    what = {"rpm": "requests", "itpm": "input tokens", "otpm": "output tokens"}[d]
    msg = (f"This request would exceed the rate limit for your organization of "
           f"{fam.limits[d]:,} {what} per minute. For details, refer to: "
           "https://docs.claude.com/en/api/rate-limits.")
    mock.record(dict(entry, status=429, reason=",".join(refused), retry_after_s=retry,
                     wait_s=None if wait == math.inf else round(wait, 3),
                     service_ms=round((time.monotonic() - t0) * 1000, 3)))
    return await send_json(writer, 429, {"type": "error", "error": {
        "type": "rate_limit_error", "message": msg}}, hdrs)


def rfc3339(epoch):
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def ratelimit_headers(args, fam, now):
    """The anthropic-ratelimit-* headers of account `fam` now (none with --no-ratelimit-headers)."""
    if args.no_ratelimit_headers:
        return []
    used = fam.used(now)
    wall = time.time()
    out = []
    rnd = (lambda x: x) if args.exact_remaining else (lambda x: (x // 1000) * 1000)
    rem = {}
    for dim, name in (("rpm", "requests"), ("itpm", "input-tokens"), ("otpm", "output-tokens")):
        limit = fam.limits.get(dim)
        if not limit:
            continue
        left = max(0, limit - used[dim])
        rem[dim] = (left, limit)
        reset = rfc3339(wall + fam.lim[dim].reset_in(now))
        out += [(f"anthropic-ratelimit-{name}-limit", limit),
                (f"anthropic-ratelimit-{name}-remaining", left if dim == "rpm" else rnd(left)),
                (f"anthropic-ratelimit-{name}-reset", reset)]
    tok = [d for d in ("itpm", "otpm") if d in rem]
    if tok:
        d = min(tok, key=lambda d: rem[d][0])
        out += [("anthropic-ratelimit-tokens-limit", rem[d][1]),
                ("anthropic-ratelimit-tokens-remaining", rnd(rem[d][0])),
                ("anthropic-ratelimit-tokens-reset", rfc3339(wall + fam.lim[d].reset_in(now)))]
    return out
