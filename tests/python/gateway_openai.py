"""The gateway through the official `openai` Python client.

Starts a mock OpenAI-compatible upstream (stdlib http.server) and `llmroute serve` on free
ports, then checks what a client of the OpenAI SDK sees: a whole answer, a streamed one with
usage, a tool call, `RateLimitError` with the `retry-after` header when the tenant tier is full,
and `AuthenticationError` for a bad key. SIGTERM then stops the gateway with exit status 0.

Usage: python gateway_openai.py PATH/TO/llmroute
"""

import hashlib
import json
import os
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai

from gateway_process import serving

KEY = "llmr-python-test-key"
USAGE = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}


class Upstream(BaseHTTPRequestHandler):
    """Answers /v1/chat/completions: a tool call when tools are offered, else text."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if body.get("stream"):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            base = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "model": body["model"]}
            for piece in ["Hel", "lo!"]:
                chunk = dict(base, choices=[{"index": 0, "delta": {"content": piece}, "finish_reason": None}])
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            end = dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}])
            self.wfile.write(f"data: {json.dumps(end)}\n\n".encode())
            self.wfile.write(f"data: {json.dumps(dict(base, choices=[], usage=USAGE))}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            return
        if body.get("tools"):
            call = {"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": "Hello from upstream"}
            finish = "stop"
        answer = {"id": "chatcmpl-up", "object": "chat.completion", "created": 0, "model": body["model"],
                  "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": USAGE}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main(llmroute):
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    work = tempfile.mkdtemp()
    config = os.path.join(work, "providers.yaml")
    with open(config, "w") as f:
        f.write(f"""
defaults: {{ model: chat }}
providers:
  - name: up
    api: openai
    base_url: http://127.0.0.1:{upstream.server_address[1]}/v1
    api_key_env: UP_KEY
    models:
      - {{ name: small, aliases: [chat], price: {{ input: 1, output: 2 }} }}
tenants:
  tiers: {{ tiny: {{ rpm: 4 }} }}
  members: {{ py: tiny }}
gateway:
  keys:
    - {{ sha256: {hashlib.sha256(KEY.encode()).hexdigest()}, tenant: py }}
""")
    with serving(llmroute, config, secrets=("S3CRET", KEY), UP_KEY="sk-upstream-S3CRET") as gateway:
        base = gateway.base + "/v1"
        client = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0)
        messages = [{"role": "user", "content": "Hi"}]

        whole = client.chat.completions.create(model="chat", messages=messages)
        assert whole.choices[0].message.content == "Hello from upstream", whole
        assert whole.usage.total_tokens == 17, whole.usage

        stream = client.chat.completions.create(
            model="chat", messages=messages, stream=True, stream_options={"include_usage": True})
        text, usage = "", None
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
            if chunk.usage:
                usage = chunk.usage
        assert text == "Hello!", text
        assert usage is not None and usage.completion_tokens == 5, usage

        tools = [{"type": "function", "function": {
            "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
        called = client.chat.completions.create(model="chat", messages=messages, tools=tools)
        call = called.choices[0].message.tool_calls[0]
        assert called.choices[0].finish_reason == "tool_calls", called
        assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})

        # The tier allows 4 requests a minute: the fifth is refused, with a wait to honour.
        client_with_deadline = client.with_options(default_headers={"x-llmroute-timeout": "1"})
        client_with_deadline.chat.completions.create(model="chat", messages=messages)
        try:
            client_with_deadline.chat.completions.create(model="chat", messages=messages)
            raise AssertionError("the fifth request in a minute was not refused")
        except openai.RateLimitError as e:
            retry_after = int(e.response.headers["retry-after"])
            assert 1 <= retry_after <= 61, retry_after
            assert e.body["type"] == "rate_limit_exceeded", e.body

        try:
            openai.OpenAI(base_url=base, api_key="llmr-wrong", max_retries=0).chat.completions.create(
                model="chat", messages=messages)
            raise AssertionError("a wrong key was let in")
        except openai.AuthenticationError as e:
            assert e.body["code"] == "invalid_api_key", e.body
    upstream.shutdown()
    print("gateway_openai: whole, streamed, tool call, RateLimitError with retry-after, AuthenticationError: ok")


if __name__ == "__main__":
    main(sys.argv[1])
