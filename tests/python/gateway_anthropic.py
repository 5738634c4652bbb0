"""The gateway's `/v1/messages` through the official `anthropic` Python client.

Starts the mock Anthropic and chat-completions upstreams of tests/agents/mock_upstreams.py and
`llmroute serve` on free ports, then checks what a client of the Anthropic SDK sees, served by
an Anthropic upstream (`claude`) and by an OpenAI-compatible one (`via-chat`): a whole answer,
a streamed one (`messages.stream`), a tool round trip, `count_tokens`, `RateLimitError` with the
`retry-after` header when the tenant tier is full, and `AuthenticationError` for a bad key.
SIGTERM then stops the gateway with exit status 0.

Usage: python gateway_anthropic.py PATH/TO/llmroute
"""

import hashlib
import os
import sys
import tempfile

import anthropic

from gateway_process import serving

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "agents"))
from mock_upstreams import MARKER, MockServer  # noqa: E402

KEY = "llmr-python-anthropic-key"
TOOL = {"name": "Bash", "description": "Run a shell command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                         "required": ["command"]}}


def config(anthropic_url, chat_url):
    key_hash = hashlib.sha256(KEY.encode()).hexdigest()
    return f"""
providers:
  - name: an
    api: anthropic
    base_url: {anthropic_url}
    api_key_env: UP_KEY
    models:
      - {{ name: claude-x, aliases: [claude], price: {{ input: 3, output: 15 }} }}
  - name: oa
    api: openai
    base_url: {chat_url}/v1
    api_key_env: UP_KEY
    models:
      - {{ name: small, aliases: [via-chat], price: {{ input: 1, output: 2 }} }}
tenants:
  tiers: {{ tiny: {{ rpm: 12 }} }}
  members: {{ py: tiny }}
gateway:
  keys:
    - {{ sha256: {key_hash}, tenant: py }}
"""


def tool_round_trip(client, model):
    """A call of `Bash`, its result sent back, and the answer quoting it."""
    ask = [{"role": "user", "content": "Run echo"}]
    first = client.messages.create(model=model, max_tokens=256, tools=[TOOL], messages=ask)
    assert first.stop_reason == "tool_use", first
    call = next(b for b in first.content if b.type == "tool_use")
    assert call.name == "Bash" and "command" in call.input, call
    turn = ask + [{"role": "assistant", "content": first.content},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                "content": MARKER + "\n"}]}]
    second = client.messages.create(model=model, max_tokens=256, tools=[TOOL], messages=turn)
    assert MARKER in second.content[0].text, second


def streamed(client, model):
    """A streamed tool call, read with `messages.stream`: the events and the final message."""
    ask = [{"role": "user", "content": "Run echo"}]
    with client.messages.stream(model=model, max_tokens=256, tools=[TOOL], messages=ask) as s:
        kinds = [event.type for event in s]
        final = s.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    assert "input_json" in kinds or "content_block_delta" in kinds, kinds
    assert final.stop_reason == "tool_use", final
    call = next(b for b in final.content if b.type == "tool_use")
    assert call.input.get("command"), call
    assert final.usage.output_tokens > 0, final.usage


def main(llmroute):
    work = tempfile.mkdtemp()
    with MockServer("anthropic") as up_anthropic, MockServer("chat") as up_chat:
        path = os.path.join(work, "providers.yaml")
        with open(path, "w") as f:
            f.write(config(up_anthropic.url, up_chat.url))
        with serving(llmroute, path, secrets=("S3CRET", KEY), UP_KEY="sk-upstream-S3CRET") as gateway:
            base = gateway.base
            client = anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0)
            for model in ("claude", "via-chat"):
                whole = client.messages.create(
                    model=model, max_tokens=64, messages=[{"role": "user", "content": "Hi"}])
                assert whole.type == "message" and whole.content[0].type == "text", whole
                assert whole.usage.input_tokens > 0, whole.usage
                tool_round_trip(client, model)
                streamed(client, model)
            count = client.messages.count_tokens(
                model="claude", messages=[{"role": "user", "content": "Hello there"}])
            assert count.input_tokens > 0, count

            # The tier allows 12 requests a minute and 8 went out (count_tokens calls no provider and is
            # not counted): the 13th is refused, with a wait to honour.
            limited = client.with_options(default_headers={"x-llmroute-timeout": "1"})
            refused = None
            for _ in range(5):
                try:
                    limited.messages.create(model="claude", max_tokens=16,
                                            messages=[{"role": "user", "content": "Hi"}])
                except anthropic.RateLimitError as e:
                    refused = e
                    break
            assert refused is not None, "the tier's 13th request in a minute was not refused"
            retry_after = int(refused.response.headers["retry-after"])
            assert 1 <= retry_after <= 61, retry_after
            assert refused.body["error"]["type"] == "rate_limit_error", refused.body

            try:
                anthropic.Anthropic(base_url=base, api_key="llmr-wrong", max_retries=0).messages.create(
                    model="claude", max_tokens=16, messages=[{"role": "user", "content": "Hi"}])
                raise AssertionError("a wrong key was let in")
            except anthropic.AuthenticationError as e:
                assert e.body["error"]["type"] == "authentication_error", e.body
    print("gateway_anthropic: whole, streamed, tool round trip (Anthropic and chat upstreams), "
          "count_tokens, RateLimitError with retry-after, AuthenticationError: ok")


if __name__ == "__main__":
    main(sys.argv[1])
