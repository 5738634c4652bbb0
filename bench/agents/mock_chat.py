"""POST /v1/chat/completions: OpenAI chat completions, streamed or whole."""

import asyncio
import hashlib
import json
import time

from mock_answers import split, timeline, tool_input, words_text
from mock_http import chunk, head, send_json
from mock_openai import openai_admit, openai_headers, openai_plan, spread, text_of
from mock_tokens import tokens_of


async def chat(mock, req, headers, writer, t0, nbytes):
    """The handler: a 429, or the answer (whole or streamed), logged either way."""
    msgs = req.get("messages") or []
    prompt = max(1, tokens_of(prompt_chars(msgs)))
    max_tokens = req.get("max_completion_tokens") or req.get("max_tokens")
    rec = await openai_admit(mock, "chat", prompt, max_tokens, headers, writer, t0, nbytes)
    if rec is None:
        return
    last = msgs[-1] if msgs else {}
    seed, kind, n, tool, rng = openai_plan(mock, text_of(last.get("content")),
                                           req.get("tools"), max_tokens)
    ttfb, stream_s, chunks = timeline(mock.timing, seed)
    mock.openai.tokens["completion"] += n
    answer = compose(req, seed, kind, n, tool, rng, prompt)
    hdrs = [("x-mock-seq", rec["seq"])] + openai_headers(mock.args, mock.openai,
                                                         time.monotonic())
    await asyncio.sleep(max(0.0, t0 + ttfb - time.monotonic()))
    if not req.get("stream"):
        t_first = await send_whole(writer, answer, hdrs, t0 + ttfb + stream_s)
    else:
        t_first = await stream_chunks(writer, req, answer, chunks, stream_s, hdrs)
    rec.update(status=200, output_tokens=n, stream=bool(req.get("stream")),
               ttfb_ms=round((t_first - t0) * 1000, 3),
               service_ms=round((time.monotonic() - t0) * 1000, 3))


def prompt_chars(msgs):
    """The characters the prompt counts: contents, tool calls' names and arguments."""
    chars = 0
    for m in msgs:
        chars += len(text_of(m.get("content")))
        for c in m.get("tool_calls") or []:
            fn = c.get("function") or {}
            chars += len(fn.get("name", "")) + len(fn.get("arguments", ""))
    return chars


def compose(req, seed, kind, n, tool, rng, prompt):
    """The answer's parts: base fields, usage, text or tool call, finish reason."""
    a = {"kind": kind, "tool": tool,
         "base": {"id": "chatcmpl-mock" + hashlib.sha1(seed).hexdigest()[:16],
                  "created": int(time.time()), "model": req.get("model", "mock")},
         "usage": {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n,
                   "prompt_tokens_details": {"cached_tokens": 0}}}
    if kind == "tool":
        a["args"] = json.dumps(tool_input(rng, tool["input_schema"], n))
        a["call_id"] = "call_" + hashlib.sha1(seed + b"call").hexdigest()[:24]
        a["text"], a["finish"] = None, "tool_calls"
    else:
        a["text"], a["finish"] = words_text(rng, n), "stop"
    return a


async def send_whole(writer, a, hdrs, due):
    """The answer as one chat.completion at `due` (monotonic); returns when it was begun."""
    await asyncio.sleep(max(0.0, due - time.monotonic()))
    message = {"role": "assistant", "content": a["text"]}
    if a["kind"] == "tool":
        message["tool_calls"] = [{"id": a["call_id"], "type": "function", "function": {
            "name": a["tool"]["name"], "arguments": a["args"]}}]
    t_first = time.monotonic()
    await send_json(writer, 200, dict(a["base"], object="chat.completion", usage=a["usage"],
                                      choices=[{"index": 0, "message": message,
                                                "finish_reason": a["finish"]}]), hdrs)
    return t_first


def data_event(obj):
    """One `data:` SSE event, as a chunk."""
    return chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")


def delta_event(a, d, fin=None):
    """A chat.completion.chunk carrying delta `d`."""
    return data_event(dict(a["base"], object="chat.completion.chunk",
                           choices=[{"index": 0, "delta": d, "finish_reason": fin}]))


async def stream_chunks(writer, req, a, chunks, stream_s, hdrs):
    """The answer as chat.completion.chunk events; returns when the first was written."""
    writer.write(head(200, [("content-type", "text/event-stream"),
                            ("transfer-encoding", "chunked"), *hdrs])
                 + delta_event(a, {"role": "assistant", "content": ""}))
    await writer.drain()
    t_first = time.monotonic()
    if a["kind"] == "tool":
        events = [delta_event(a, {"tool_calls": [{"index": 0, "id": a["call_id"],
                                                  "type": "function",
                                                  "function": {"name": a["tool"]["name"],
                                                               "arguments": ""}}]})]
        events += [delta_event(a, {"tool_calls": [{"index": 0, "function": {"arguments": p}}]})
                   for p in split(a["args"], chunks)]
    else:
        events = [delta_event(a, {"content": p}) for p in split(a["text"], chunks)]
    await spread(writer, events, stream_s)
    tail = delta_event(a, {}, a["finish"])
    if (req.get("stream_options") or {}).get("include_usage"):
        tail += data_event(dict(a["base"], object="chat.completion.chunk", choices=[],
                                usage=a["usage"]))
    writer.write(tail + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()
    return t_first
