"""`POST /v1/responses` through the official `openai` Python client.

Starts a mock OpenAI-compatible chat-completions upstream (stdlib http.server) and `llmroute
serve` on free ports, then checks what a client of the OpenAI SDK's Responses API sees: a whole
response, a streamed one (raw events in order, and the SDK's `responses.stream` helper), a
function-call round trip (the second call sends the first's output items back with a
`function_call_output`), the tools left out named in `x-llmroute-dropped`, `BadRequestError`
for `previous_response_id` and `AuthenticationError` for a bad key. SIGTERM then stops the
gateway with exit status 0.

Usage: python gateway_responses.py PATH/TO/llmroute
"""

import hashlib
import json
import os
import sys
import tempfile
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai

from gateway_process import serving
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

KEY = "llmr-python-responses-key"
USAGE = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17,
         "prompt_tokens_details": {"cached_tokens": 4}}
SEEN = []


class Upstream(BaseHTTPRequestHandler):
    """Answers /v1/chat/completions: a tool call when tools are offered and no tool answered
    yet, else text; streamed when asked."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        SEEN.append(body)
        answered = body["messages"][-1]["role"] == "tool"
        call = bool(body.get("tools")) and not answered
        text = "It is 18C in Paris." if answered else "Hello!"
        if body.get("stream"):
            self.stream(body, call)
            return
        if call:
            tool_call = {"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
            message = {"role": "assistant", "content": None, "tool_calls": [tool_call]}
        else:
            message = {"role": "assistant", "content": text}
        finish = "tool_calls" if call else "stop"
        answer = {"id": "chatcmpl-up", "object": "chat.completion", "created": 0, "model": body["model"],
                  "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": USAGE}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def stream(self, body, call):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        base = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "model": body["model"]}

        def send(delta, finish=None):
            chunk = dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": finish}])
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())

        if call:
            first = {"index": 0, "id": "call_s1", "type": "function",
                     "function": {"name": "get_weather", "arguments": ""}}
            send({"role": "assistant", "tool_calls": [first]})
            for piece in ["{\"city\": ", "\"Paris\"}"]:
                send({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
            send({}, "tool_calls")
        else:
            for piece in ["Hel", "lo!"]:
                send({"content": piece})
            send({}, "stop")
        self.wfile.write(f"data: {json.dumps(dict(base, choices=[], usage=USAGE))}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


TOOLS = [
    {"type": "function", "name": "get_weather", "description": "The weather in a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    {"type": "web_search"},
]


def whole(client):
    raw = client.responses.with_raw_response.create(model="chat", instructions="Be brief.", input="Hi")
    # Every field the SDK's `Response` requires is there, of its type.
    Response.model_validate(raw.http_response.json())
    response = raw.parse()
    assert response.id.startswith("resp_"), response
    assert response.status == "completed", response
    assert response.output_text == "Hello!", response
    assert response.usage.total_tokens == 17, response.usage
    assert response.usage.input_tokens_details.cached_tokens == 4, response.usage
    assert SEEN[-1]["messages"][0] == {"role": "system", "content": "Be brief."}, SEEN[-1]


def streamed(client):
    events = list(client.responses.create(model="chat", input="Hi", stream=True))
    kinds = [e.type for e in events]
    assert kinds == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed",
    ], kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Hello!", text
    done, end = events[-2].item, events[-1].response
    assert end.output_text == "Hello!" and end.output[0].id == done.id == events[2].item.id, end
    assert end.usage.output_tokens == 5, end.usage
    strict_events(client, {"model": "chat", "input": "Hi", "tools": TOOLS, "stream": True})
    # The SDK's helper assembles the response from the events, and takes the final one.
    with client.responses.stream(model="chat", input="Hi", tools=TOOLS) as stream:
        arguments = "".join(e.delta for e in stream if e.type == "response.function_call_arguments.delta")
        final = stream.get_final_response()
    assert arguments == "{\"city\": \"Paris\"}", arguments
    call = final.output[0]
    assert (call.type, call.name, call.call_id) == ("function_call", "get_weather", "call_s1"), final


def strict_events(client, body):
    """Each event of a streamed `body`, read off the wire: named by its type, and valid as the
    SDK's `ResponseStreamEvent` with every required field."""
    request = urllib.request.Request(
        f"{client.base_url}responses", data=json.dumps(body).encode(), method="POST",
        headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"})
    with urllib.request.urlopen(request) as answer:
        text = answer.read().decode()
    events = TypeAdapter(ResponseStreamEvent)
    blocks = [b for b in text.split("\n\n") if b.strip()]
    for block in blocks:
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        data = json.loads(fields["data"])
        assert fields["event"] == data["type"], block
        events.validate_python(data)
    assert json.loads(dict(line.split(": ", 1) for line in blocks[-1].splitlines())["data"])["type"] \
        == "response.completed", blocks[-1]


def round_trip(client):
    conversation = [{"role": "user", "content": "Weather in Paris?"}]
    raw = client.responses.with_raw_response.create(model="chat", input=conversation, tools=TOOLS)
    assert raw.headers["x-llmroute-dropped"] == "tools[1]:web_search", raw.headers
    first = raw.parse()
    call = first.output[0]
    assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Paris"}, first
    conversation += first.output
    conversation.append({"type": "function_call_output", "call_id": call.call_id, "output": "18C"})
    second = client.responses.create(model="chat", input=conversation, tools=TOOLS)
    assert second.output_text == "It is 18C in Paris.", second
    sent = SEEN[-1]["messages"]
    assert sent[1]["role"] == "assistant" and sent[1]["tool_calls"][0]["id"] == "call_1", sent
    assert sent[2] == {"role": "tool", "tool_call_id": "call_1", "content": "18C"}, sent


def refusals(client, base):
    try:
        client.responses.create(model="chat", input="Hi", previous_response_id="resp_1")
        raise AssertionError("previous_response_id was taken")
    except openai.BadRequestError as e:
        assert "`store`" in e.body["message"], e.body
    try:
        openai.OpenAI(base_url=base, api_key="llmr-wrong", max_retries=0).responses.create(
            model="chat", input="Hi")
        raise AssertionError("a wrong key was let in")
    except openai.AuthenticationError as e:
        assert e.body["code"] == "invalid_api_key", e.body


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
  tiers: {{ basic: {{}} }}
  members: {{ py: basic }}
gateway:
  keys:
    - {{ sha256: {hashlib.sha256(KEY.encode()).hexdigest()}, tenant: py }}
""")
    with serving(llmroute, config, secrets=("S3CRET", KEY), UP_KEY="sk-upstream-S3CRET") as gateway:
        base = gateway.base + "/v1"
        client = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0)
        whole(client)
        streamed(client)
        round_trip(client)
        refusals(client, base)
    upstream.shutdown()
    print("gateway_responses: whole, streamed (events and the stream helper), function-call round trip, "
          "x-llmroute-dropped, BadRequestError for previous_response_id, AuthenticationError: ok")


if __name__ == "__main__":
    main(sys.argv[1])
