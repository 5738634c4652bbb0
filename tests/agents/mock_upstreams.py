"""Scripted mock LLM upstreams for the real-agent tests (stdlib only).

Three servers, each recording every request (method, path, headers, JSON body) in memory and,
optionally, one JSON object a line in a JSONL file:

- `anthropic`: `POST /v1/messages` (whole or `stream: true` SSE with the Anthropic event
  sequence), `POST /v1/messages/count_tokens`. What `llmroute serve` calls for an Anthropic
  deployment.
- `chat`: `POST /v1/chat/completions` (whole or SSE `chat.completion.chunk`s, usage chunk,
  `[DONE]`). What `llmroute serve` calls for an OpenAI-compatible deployment.
- `responses`: `POST /v1/responses` (SSE Responses events). REFERENCE ONLY: Codex runs straight
  against it, so its output is what the gateway's own `/v1/responses` must look like.

The script, the same for all three: when the agent's shell tool is offered and the last user
turn holds no tool result, call the shell tool with `echo llmroute-tool-ok`; once the tool
result came back, answer text quoting it ("The command printed: llmroute-tool-ok"). When the
result does not hold the marker line, the answer says so and never contains the marker. Requests
without the shell tool (titles, summaries) get a short text answer.

Run one: python3 mock_upstreams.py anthropic|chat|responses [--port N] [--record FILE]
It prints `listening on http://127.0.0.1:PORT` and serves until interrupted.
"""

import argparse
import itertools
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MARKER = "llmroute-tool-ok"
SHELL_COMMAND = f"echo {MARKER}"
SHELL_TOOLS = ("Bash", "exec_command", "shell_command", "shell")
USAGE = {"input": 1200, "output": 24, "cache_read": 1000, "cache_write": 100}
_ids = itertools.count(1)


def new_id(prefix):
    return f"{prefix}_mock{next(_ids):04d}"


# --- the script --------------------------------------------------------------------------------

def shell_arguments(schema):
    """Arguments for a shell tool from its JSON schema: `command`/`cmd`, string or argv array."""
    props = (schema or {}).get("properties", {})
    args = {}
    for key in ("command", "cmd"):
        if key in props:
            is_array = props[key].get("type") == "array"
            args[key] = ["bash", "-lc", SHELL_COMMAND] if is_array else SHELL_COMMAND
            break
    if "description" in props:
        args["description"] = "Print the llmroute marker"
    return args


def final_text(tool_output):
    """The answer once the tool ran: quote the marker line, or say it is missing."""
    lines = [line.strip() for line in str(tool_output).splitlines()]
    if MARKER in lines:
        return f"The command printed: {MARKER}"
    return "The tool output did not hold the marker: " + str(tool_output).replace(MARKER, "<m>")


def text_of(content):
    """Plain text of a string or a list of text-ish content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(text_of(b.get("text", b.get("content", ""))) for b in content
                         if isinstance(b, dict))
    return "" if content is None else json.dumps(content)


def trailing(items, is_model_turn):
    """The items after the last one the model produced (its last turn's answers, if any)."""
    items = items if isinstance(items, list) else []
    for index in range(len(items) - 1, -1, -1):
        if isinstance(items[index], dict) and is_model_turn(items[index]):
            return items[index + 1:]
    return []


def find_tool(tools, names=SHELL_TOOLS):
    """(name, schema) of the first shell tool in Anthropic, chat or Responses tool lists."""
    flat = []
    for tool in tools or []:
        flat.extend(tool.get("tools", []) if tool.get("type") == "namespace" else [tool])
    for name in names:
        for tool in flat:
            fn = tool.get("function", tool)
            if fn.get("name") == name:
                return name, fn.get("input_schema") or fn.get("parameters") or {}
    return None, None


# --- HTTP plumbing -------------------------------------------------------------------------------

class Recorder:
    """Every request seen, in order; also appended to a JSONL file when one is named."""

    def __init__(self, path=None):
        self.path, self.requests, self._lock = path, [], threading.Lock()

    def add(self, entry):
        with self._lock:
            entry["seq"] = len(self.requests)
            self.requests.append(entry)
            if self.path:
                with open(self.path, "a") as f:
                    f.write(json.dumps(entry) + "\n")


class Handler(BaseHTTPRequestHandler):
    """Reads and records the request, then calls `route(method, path, body)` of the subclass."""

    protocol_version = "HTTP/1.1"
    recorder = None
    quirks = {}

    def log_message(self, *args):
        pass

    def _read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                raw += self.rfile.read(size)
                self.rfile.readline()
                if size == 0:
                    return raw
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _handle(self):
        raw = self._read_body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = {"_undecoded": raw[:2000].decode("latin-1")}
        path = self.path.split("?")[0]
        self.recorder.add({"time": time.time(), "method": self.command, "path": self.path,
                           "headers": dict(self.headers.items()), "body": body})
        self.route(self.command, path, body or {})

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_OPTIONS = _handle

    def send_json(self, obj, status=200):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def start_sse(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def sse(self, event, data):
        """One SSE event (`event:` line unless event is None) as one HTTP chunk."""
        if event in self.quirks.get("omit", ()):
            return
        text = json.dumps(data) if not isinstance(data, str) else data
        frame = (f"event: {event}\n" if event else "") + f"data: {text}\n\n"
        payload = frame.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
        self.wfile.flush()

    def end_sse(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def not_found(self, path):
        self.send_json({"type": "error", "error": {"type": "not_found_error",
                                                   "message": f"mock: no route {path}"}}, 404)


# --- Anthropic Messages -------------------------------------------------------------------------

class AnthropicHandler(Handler):
    def route(self, method, path, body):
        if method == "POST" and path == "/v1/messages":
            return self.messages(body)
        if method == "POST" and path == "/v1/messages/count_tokens":
            return self.send_json({"input_tokens": len(json.dumps(body)) // 4})
        if method == "HEAD" or (method == "GET" and path in ("/", "/v1")):
            return self.send_json({})
        return self.not_found(path)

    def plan(self, body):
        """The content blocks and stop reason to answer with."""
        last = (body.get("messages") or [{}])[-1]
        content = last.get("content") if last.get("role") == "user" else None
        results = [b for b in content or []
                   if isinstance(b, dict) and b.get("type") == "tool_result"]
        name, schema = find_tool(body.get("tools"))
        blocks = []
        if (body.get("thinking") or {}).get("type") in ("enabled", "adaptive"):
            blocks.append({"type": "thinking", "thinking": "Plan: run the command.",
                           "signature": "mock-signature-" + "A" * 40})
        if results:
            blocks.append({"type": "text", "text": final_text(text_of(results[-1].get("content")))})
            return blocks, "end_turn"
        if name:
            blocks.append({"type": "tool_use", "id": new_id("toolu"), "name": name,
                           "input": shell_arguments(schema)})
            return blocks, "tool_use"
        return blocks + [{"type": "text", "text": "Mock title"}], "end_turn"

    def messages(self, body):
        blocks, stop = self.plan(body)
        usage = {"input_tokens": USAGE["input"], "output_tokens": USAGE["output"],
                 "cache_read_input_tokens": USAGE["cache_read"],
                 "cache_creation_input_tokens": USAGE["cache_write"]}
        message = {"id": new_id("msg"), "type": "message", "role": "assistant",
                   "model": body.get("model", "mock"), "content": blocks, "stop_reason": stop,
                   "stop_sequence": None, "usage": usage}
        if not body.get("stream"):
            return self.send_json(message)
        self.start_sse()
        self.sse("message_start", {"type": "message_start", "message": dict(
            message, content=[], stop_reason=None, usage=dict(usage, output_tokens=1))})
        self.sse("ping", {"type": "ping"})
        for index, block in enumerate(blocks):
            self.stream_block(index, block)
        self.sse("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": stop, "stop_sequence": None},
                                   "usage": usage})
        self.sse("message_stop", {"type": "message_stop"})
        self.end_sse()

    def stream_block(self, index, block):
        kind = block["type"]
        start = {"text": {"type": "text", "text": ""},
                 "thinking": {"type": "thinking", "thinking": "", "signature": ""},
                 "tool_use": dict(block, input={})}[kind]
        self.sse("content_block_start", {"type": "content_block_start", "index": index,
                                         "content_block": start})
        if kind == "text":
            text = block["text"]
            deltas = [{"type": "text_delta", "text": text[:10]},
                      {"type": "text_delta", "text": text[10:]}]
        elif kind == "thinking":
            deltas = [{"type": "thinking_delta", "thinking": block["thinking"]},
                      {"type": "signature_delta", "signature": block["signature"]}]
        else:
            args = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": ""},
                      {"type": "input_json_delta", "partial_json": args[:12]},
                      {"type": "input_json_delta", "partial_json": args[12:]}]
        for delta in deltas:
            self.sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                             "delta": delta})
        self.sse("content_block_stop", {"type": "content_block_stop", "index": index})


# --- OpenAI chat completions --------------------------------------------------------------------

class ChatHandler(Handler):
    def route(self, method, path, body):
        if method == "POST" and path == "/v1/chat/completions":
            return self.completions(body)
        if method == "GET" and path == "/v1/models":
            return self.send_json({"object": "list", "data": [{"id": "mock", "object": "model"}]})
        return self.not_found(path)

    def plan(self, body):
        """(text, tool_call or None, finish_reason)."""
        results = [m for m in trailing(body.get("messages"), lambda m: m.get("role") == "assistant")
                   if m.get("role") == "tool"]
        if results:
            return final_text(text_of(results[-1].get("content"))), None, "stop"
        name, schema = find_tool(body.get("tools"))
        if name:
            call = {"id": new_id("call"), "type": "function",
                    "function": {"name": name, "arguments": json.dumps(shell_arguments(schema))}}
            return None, call, "tool_calls"
        return "Mock answer", None, "stop"

    def completions(self, body):
        text, call, finish = self.plan(body)
        usage = {"prompt_tokens": USAGE["input"], "completion_tokens": USAGE["output"],
                 "total_tokens": USAGE["input"] + USAGE["output"],
                 "prompt_tokens_details": {"cached_tokens": USAGE["cache_read"]}}
        base = {"id": new_id("chatcmpl"), "created": int(time.time()),
                "model": body.get("model", "mock")}
        if not body.get("stream"):
            message = {"role": "assistant", "content": text}
            if call:
                message["tool_calls"] = [call]
            return self.send_json(dict(base, object="chat.completion", usage=usage, choices=[
                {"index": 0, "message": message, "finish_reason": finish}]))

        def chunk(delta, finish_reason=None):
            self.sse(None, dict(base, object="chat.completion.chunk", choices=[
                {"index": 0, "delta": delta, "finish_reason": finish_reason}]))

        self.start_sse()
        chunk({"role": "assistant", "content": ""})
        if text:
            chunk({"content": text[:10]})
            chunk({"content": text[10:]})
        if call:
            args = call["function"]["arguments"]
            name = call["function"]["name"]
            chunk({"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                                   "function": {"name": name, "arguments": ""}}]})
            for piece in (args[:12], args[12:]):
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        chunk({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            self.sse(None, dict(base, object="chat.completion.chunk", choices=[], usage=usage))
        self.sse(None, "[DONE]")
        self.end_sse()


# --- OpenAI Responses (reference for the gateway's /v1/responses output) ------------------------

class ResponsesHandler(Handler):
    def route(self, method, path, body):
        if method == "POST" and path == "/v1/responses":
            return self.create_response(body)
        if method == "GET" and path == "/v1/models":
            return self.send_json({"object": "list", "data": [{"id": "mock", "object": "model"}]})
        return self.not_found(path)

    def plan(self, body):
        """The output items to answer with."""
        items = body.get("input")
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        items = items or []
        outputs = [i for i in trailing(items, lambda i: i.get("role") == "assistant"
                                             or i.get("type", "").endswith("_call"))
                   if i.get("type") in ("function_call_output", "custom_tool_call_output")]
        out = []
        if body.get("reasoning") and not self.quirks.get("no_reasoning"):
            out.append({"id": new_id("rs"), "type": "reasoning",
                        "encrypted_content": "bW9jay1yZWFzb25pbmc=",
                        "summary": [{"type": "summary_text", "text": "Run the command."}]})
        # Codex's "code mode" models get their tools in an `additional_tools` input item.
        tools = (body.get("tools") or []) + [t for i in items if i.get("type") == "additional_tools"
                                              for t in i.get("tools", [])]
        name, schema = find_tool(tools)
        call = {"id": new_id("fc"), "status": "completed", "call_id": new_id("call")}
        if outputs:
            text = final_text(text_of(outputs[-1].get("output")))
        elif name:
            return out + [dict(call, type="function_call", name=name,
                               arguments=json.dumps(shell_arguments(schema)))]
        elif find_tool(tools, ("exec",))[0]:
            script = (f'const r = await tools.exec_command({{cmd: "{SHELL_COMMAND}"}});\n'
                      "text(r.output);")
            return out + [dict(call, type="custom_tool_call", name="exec", input=script)]
        else:
            text = "Mock answer"
        return out + [{"id": new_id("msg"), "type": "message", "status": "completed",
                       "role": "assistant", "content": [{"type": "output_text", "text": text,
                                                         "annotations": []}]}]

    def create_response(self, body):
        output = self.plan(body)
        usage = {"input_tokens": USAGE["input"],
                 "input_tokens_details": {"cached_tokens": USAGE["cache_read"]},
                 "output_tokens": USAGE["output"], "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": USAGE["input"] + USAGE["output"]}
        response = {"id": new_id("resp"), "object": "response", "created_at": int(time.time()),
                    "status": "completed", "model": body.get("model", "mock"), "output": output,
                    "usage": usage}
        if not body.get("stream"):
            return self.send_json(response)
        seq = itertools.count()

        def event(kind, **fields):
            self.sse(kind, dict({"type": kind, "sequence_number": next(seq)}, **fields))

        self.start_sse()
        pending = dict(response, status="in_progress", output=[], usage=None)
        event("response.created", response=pending)
        event("response.in_progress", response=pending)
        for index, item in enumerate(output):
            self.stream_item(event, index, item)
        event("response.completed", response=response)
        self.end_sse()

    def stream_item(self, event, index, item):
        kind, item_id = item["type"], item["id"]
        if kind == "message":
            event("response.output_item.added", output_index=index,
                  item=dict(item, status="in_progress", content=[]))
            part = item["content"][0]
            where = {"item_id": item_id, "output_index": index, "content_index": 0}
            event("response.content_part.added", part=dict(part, text=""), **where)
            event("response.output_text.delta", delta=part["text"][:10], **where)
            event("response.output_text.delta", delta=part["text"][10:], **where)
            event("response.output_text.done", text=part["text"], **where)
            event("response.content_part.done", part=part, **where)
        elif kind == "function_call":
            event("response.output_item.added", output_index=index,
                  item=dict(item, status="in_progress", arguments=""))
            args = item["arguments"]
            for piece in (args[:12], args[12:]):
                event("response.function_call_arguments.delta", item_id=item_id,
                      output_index=index, delta=piece)
            event("response.function_call_arguments.done", item_id=item_id, output_index=index,
                  name=item["name"], arguments=args)
        elif kind == "custom_tool_call":
            event("response.output_item.added", output_index=index,
                  item=dict(item, status="in_progress", input=""))
            event("response.custom_tool_call_input.delta", item_id=item_id, output_index=index,
                  delta=item["input"])
            event("response.custom_tool_call_input.done", item_id=item_id, output_index=index,
                  input=item["input"])
        else:
            event("response.output_item.added", output_index=index, item=dict(item, summary=[]))
        event("response.output_item.done", output_index=index, item=item)


# --- servers ------------------------------------------------------------------------------------

HANDLERS = {"anthropic": AnthropicHandler, "chat": ChatHandler, "responses": ResponsesHandler}


class MockServer:
    """A mock upstream on 127.0.0.1 (port 0: a free one) served from a daemon thread.

    `with MockServer("anthropic") as mock: ... mock.url ... mock.requests`
    `quirks`: {"omit": {"ping", ...}} drops SSE events of those types (for probing what an
    agent needs); {"no_reasoning": True} keeps reasoning items out of Responses answers.
    """

    def __init__(self, kind, port=0, record=None, quirks=None):
        self.recorder = Recorder(record)
        handler = type(HANDLERS[kind].__name__, (HANDLERS[kind],),
                       {"recorder": self.recorder, "quirks": quirks or {}})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def requests(self):
        return self.recorder.requests

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=sorted(HANDLERS))
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--record", help="append each request as a JSON line to this file")
    parser.add_argument("--omit", action="append", default=[], help="SSE event type to drop")
    args = parser.parse_args()
    with MockServer(args.kind, args.port, args.record, {"omit": set(args.omit)}) as mock:
        print(f"listening on {mock.url}", flush=True)
        try:
            mock.thread.join()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    sys.exit(main())
