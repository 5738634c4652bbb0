"""The Messages answer: its content, whole or as the exact Anthropic event sequence.

The answer (whole or the exact Anthropic event sequence: message_start, ping,
content_block_start / content_block_delta... / content_block_stop for a thinking block when
`thinking` is enabled and for a text or tool_use block, message_delta with the usage,
message_stop); what it says and when: mock_answers.py.
"""

import asyncio
import hashlib
import json
import time

from mock_answers import plan, split, timeline, tool_input, words_text
from mock_http import chunk, head, send_json


def last_text(message):
    """The plain text of a message (text blocks and tool results): what seeds the answer."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    out = []
    for b in content or []:
        if b.get("type") == "text":
            out.append(b.get("text", ""))
        elif b.get("type") == "tool_result":
            c = b.get("content")
            out.append(c if isinstance(c, str) else
                       "\n".join(x.get("text", "") for x in c or [] if x.get("type") == "text"))
    return "\n".join(out)


def compose(mock, req, inp, creation, read):
    """(the whole answer message, its thinking tokens, (ttfb s, stream s, deltas))."""
    max_tokens = req["max_tokens"]
    last = req["messages"][-1]
    seed = hashlib.sha1(last_text(last).encode()).digest()
    thinking = (req.get("thinking") or {}).get("type") in ("enabled", "adaptive")
    think, kind, n, tool, rng = plan(mock.plan_cfg, seed, req.get("tools"), max_tokens, thinking)
    output = think + n
    timing = timeline(mock.timing, seed)
    msg_id = "msg_mock" + hashlib.sha1(seed + b"id").hexdigest()[:20]
    blocks_out = []
    if think:
        blocks_out.append({"type": "thinking", "thinking": words_text(rng, think),
                           "signature": "EqMB" + hashlib.sha256(seed).hexdigest() * 3})
    if kind == "tool":
        blocks_out.append({"type": "tool_use", "id": "toolu_" + hashlib.sha1(
            seed + b"tool").hexdigest()[:24], "name": tool["name"],
            "input": tool_input(rng, tool.get("input_schema"), n)})
        stop = "tool_use"
    else:
        blocks_out.append({"type": "text", "text": words_text(rng, n)})
        stop = "end_turn"
    usage = {"input_tokens": inp, "cache_creation_input_tokens": creation,
             "cache_read_input_tokens": read, "output_tokens": output}
    message = {"id": msg_id, "type": "message", "role": "assistant",
               "model": req.get("model", "mock"), "content": blocks_out, "stop_reason": stop,
               "stop_sequence": None, "usage": usage}
    return message, think, timing


async def send_whole(writer, message, hdrs, due, settle):
    """The answer as one JSON body at `due` (monotonic); returns when it began to be written."""
    await asyncio.sleep(max(0.0, due - time.monotonic()))
    settle()
    t_first = time.monotonic()
    await send_json(writer, 200, message, hdrs)
    return t_first


def sse(name, data):
    """One SSE event, as a chunk."""
    return chunk(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())


async def stream_events(writer, message, think, chunks, stream_s, hdrs, settle):
    """The answer as SSE over `stream_s`; returns when message_start and ping were written."""
    start = dict(message, content=[], stop_reason=None,
                 usage=dict(message["usage"], output_tokens=1))
    writer.write(head(200, [("content-type", "text/event-stream; charset=utf-8"),
                            ("cache-control", "no-cache"),
                            ("transfer-encoding", "chunked"), *hdrs])
                 + sse("message_start", {"type": "message_start", "message": start})
                 + sse("ping", {"type": "ping"}))
    await writer.drain()
    t_first = time.monotonic()
    deltas = block_deltas(message["content"], chunks, think)
    t_stream0 = time.monotonic()
    buf = await write_deltas(writer, deltas, stream_s, t_stream0)
    await asyncio.sleep(max(0.0, t_stream0 + stream_s - time.monotonic()))
    settle()
    buf += sse("message_delta", {"type": "message_delta",
                                 "delta": {"stop_reason": message["stop_reason"],
                                           "stop_sequence": None},
                                 "usage": message["usage"]})
    buf += sse("message_stop", {"type": "message_stop"})
    writer.write(buf + b"0\r\n\r\n")
    await writer.drain()
    return t_first


def block_deltas(blocks_out, chunks, think):
    """[(start|delta|stop, index, data)]: each block's start, its deltas, its stop."""
    deltas = []   # (index, delta) and block boundaries
    for index, b in enumerate(blocks_out):
        if b["type"] == "thinking":
            text = b["thinking"]
            pieces = split(text, max(1, chunks // 2))
            deltas.append(("start", index, {"type": "thinking", "thinking": "",
                                            "signature": ""}))
            deltas += [("delta", index, {"type": "thinking_delta", "thinking": p})
                       for p in pieces]
            deltas.append(("delta", index, {"type": "signature_delta",
                                            "signature": b["signature"]}))
        elif b["type"] == "text":
            deltas.append(("start", index, {"type": "text", "text": ""}))
            deltas += [("delta", index, {"type": "text_delta", "text": p})
                       for p in split(b["text"], max(1, chunks - chunks // 2 if think
                                                     else chunks))]
        else:
            deltas.append(("start", index, dict(b, input={})))
            args = json.dumps(b["input"])
            deltas += [("delta", index, {"type": "input_json_delta", "partial_json": p})
                       for p in split(args, max(1, chunks - chunks // 2 if think
                                                else chunks))]
        deltas.append(("stop", index, None))
    return deltas


async def write_deltas(writer, deltas, stream_s, t_stream0):
    """The deltas, spread over the stream time; returns the events not yet written."""
    n_delta = sum(1 for d in deltas if d[0] == "delta")
    sent = 0
    buf = b""
    for what, index, data in deltas:
        if what == "start":
            buf += sse("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": data})
        elif what == "stop":
            buf += sse("content_block_stop", {"type": "content_block_stop", "index": index})
        else:
            buf += sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                               "delta": data})
            sent += 1
            writer.write(buf)
            buf = b""
            await writer.drain()
            due = t_stream0 + stream_s * sent / (n_delta + 1)
            await asyncio.sleep(max(0.0, due - time.monotonic()))
    return buf
