"""POST /v1/responses: OpenAI Responses, streamed or whole.

The Responses workload's direct baseline (the gateway serves /v1/responses over the chat
route); the same account and limiter as chat completions (mock_openai.py).
"""

import asyncio
import hashlib
import json
import time

from mock_answers import split, timeline, tool_input, words_text
from mock_http import chunk, head, send_json
from mock_openai import openai_admit, openai_headers, openai_plan, spread, text_of
from mock_tokens import tokens_of


async def responses(mock, req, headers, writer, t0, nbytes):
    """The handler: a 429, or the answer (whole or streamed), logged either way."""
    chars, last_text = prompt_chars(req)
    prompt = max(1, tokens_of(chars))
    max_tokens = req.get("max_output_tokens")
    rec = await openai_admit(mock, "responses", prompt, max_tokens, headers, writer, t0,
                             nbytes)
    if rec is None:
        return
    seed, kind, n, tool, rng = openai_plan(mock, last_text, req.get("tools"), max_tokens)
    ttfb, stream_s, chunks = timeline(mock.timing, seed)
    mock.openai.tokens["completion"] += n
    response = compose(req, seed, kind, n, tool, rng, prompt)
    hdrs = [("x-mock-seq", rec["seq"])] + openai_headers(mock.args, mock.openai,
                                                         time.monotonic())
    await asyncio.sleep(max(0.0, t0 + ttfb - time.monotonic()))
    if not req.get("stream"):
        await asyncio.sleep(max(0.0, t0 + ttfb + stream_s - time.monotonic()))
        t_first = time.monotonic()
        await send_json(writer, 200, response, hdrs)
    else:
        t_first = await stream_events(writer, response, chunks, stream_s, hdrs)
    rec.update(status=200, output_tokens=n, stream=bool(req.get("stream")),
               ttfb_ms=round((t_first - t0) * 1000, 3),
               service_ms=round((time.monotonic() - t0) * 1000, 3))


def prompt_chars(req):
    """(the characters the prompt counts, the text of the last message or call output)."""
    items = req.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    items = items or []
    chars = len(req.get("instructions") or "")
    last_text = ""
    for it in items:
        t = it.get("type", "message")
        if t == "message":
            last_text = text_of(it.get("content"))
            chars += len(last_text)
        elif t == "function_call":
            chars += len(it.get("name", "")) + len(it.get("arguments", ""))
        elif t == "function_call_output":
            last_text = text_of(it.get("output"))
            chars += len(last_text)
    return chars, last_text


def compose(req, seed, kind, n, tool, rng, prompt):
    """The completed response: one output item, a function call or a message."""
    rid = "resp_mock" + hashlib.sha1(seed).hexdigest()[:16]
    usage = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": n, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": prompt + n}
    if kind == "tool":
        args = json.dumps(tool_input(rng, tool["input_schema"], n))
        item = {"id": "fc_" + hashlib.sha1(seed + b"fc").hexdigest()[:20],
                "type": "function_call", "status": "completed", "name": tool["name"],
                "call_id": "call_" + hashlib.sha1(seed + b"call").hexdigest()[:24],
                "arguments": args}
    else:
        text = words_text(rng, n)
        item = {"id": "msg_" + hashlib.sha1(seed + b"msg").hexdigest()[:20],
                "type": "message", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}
    return {"id": rid, "object": "response", "created_at": int(time.time()),
            "status": "completed", "model": req.get("model", "mock"), "output": [item],
            "usage": usage}


async def stream_events(writer, response, chunks, stream_s, hdrs):
    """The response as its SSE events, numbered; returns when the first were written."""
    seq = iter(range(1 << 30))

    def ev(kind_, **fields):
        data = dict({"type": kind_, "sequence_number": next(seq)}, **fields)
        return chunk(f"event: {kind_}\ndata: {json.dumps(data)}\n\n".encode())

    pending = dict(response, status="in_progress", output=[], usage=None)
    writer.write(head(200, [("content-type", "text/event-stream"),
                            ("transfer-encoding", "chunked"), *hdrs])
                 + ev("response.created", response=pending)
                 + ev("response.in_progress", response=pending))
    await writer.drain()
    t_first = time.monotonic()
    item = response["output"][0]
    events, tail = item_events(ev, item, chunks)
    await spread(writer, events, stream_s)
    tail += ev("response.output_item.done", output_index=0, item=item)
    tail += ev("response.completed", response=response)
    writer.write(tail + b"0\r\n\r\n")
    await writer.drain()
    return t_first


def item_events(ev, item, chunks):
    """(the output item's events to spread, the events that close it)."""
    if item["type"] == "function_call":
        args = item["arguments"]
        events = [ev("response.output_item.added", output_index=0,
                     item=dict(item, status="in_progress", arguments=""))]
        events += [ev("response.function_call_arguments.delta", item_id=item["id"],
                      output_index=0, delta=p) for p in split(args, chunks)]
        tail = ev("response.function_call_arguments.done", item_id=item["id"],
                  output_index=0, arguments=args)
        return events, tail
    where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
    part = item["content"][0]
    text = part["text"]
    events = [ev("response.output_item.added", output_index=0,
                 item=dict(item, status="in_progress", content=[])) +
              ev("response.content_part.added", part=dict(part, text=""), **where)]
    events += [ev("response.output_text.delta", delta=p, **where)
               for p in split(text, chunks)]
    tail = (ev("response.output_text.done", text=text, **where) +
            ev("response.content_part.done", part=part, **where))
    return events, tail
