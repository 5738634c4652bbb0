"""The real agents through `llmroute serve`, against mock Anthropic and OpenAI-compatible upstreams.

    python3 through_gateway.py PATH/TO/llmroute NODE_BIN_DIR [--only claude|codex]

Starts the mock upstreams of mock_upstreams.py and a gateway whose models are served by them:
`claude-sonnet-4-5` by the Anthropic mock, `claude-via-chat` and `gpt-5.5` by the chat mock,
`gpt-via-anthropic` by the Anthropic mock. Then runs each agent's shell-tool round trip
(claude_code.py, codex.py) through the gateway, once per upstream kind, and checks:
- each agent exits 0 with the command's output in its final answer;
- the upstream got the tool's result back (the marker in a tool result);
- afterwards nothing is in flight (`GET /v1/quota`);
- the official TypeScript SDKs (sdk_ts.mjs) get whole and streamed answers from both;
- the usage records hold every upstream call, each with tokens and a cost.
SIGTERM then stops the gateway, which must exit 0 with no key in its log.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.request

import agent_common as common

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from gateway_process import serving  # noqa: E402
from claude_code import run_claude
from codex import run_codex
from mock_upstreams import MockServer

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = "llmr-agent-test-key"
UPSTREAM_KEY = "sk-upstream-agent-S3CRET"

CONFIG = """
providers:
  - name: an
    api: anthropic
    base_url: {anthropic}
    api_key_env: AGENT_UPSTREAM_KEY
    models:
      - {{ name: claude-sonnet-4-5, aliases: [gpt-via-anthropic], price: {{ input: 3, output: 15, cached_input: 0.3 }}, capabilities: [tools, vision, json_schema, reasoning] }}
  - name: oa
    api: openai
    base_url: {chat}/v1
    api_key_env: AGENT_UPSTREAM_KEY
    models:
      - {{ name: mock-chat, aliases: [claude-via-chat, gpt-5.5], price: {{ input: 1, output: 4 }}, capabilities: [tools, vision, json_schema, reasoning] }}
tenants:
  tiers: {{ dev: {{ rpm: 600 }} }}
  members: {{ agents: dev }}
gateway:
  keys:
    - {{ sha256: {key_hash}, tenant: agents }}
"""

# (agent, model, upstream kind that serves it)
RUNS = [
    ("claude", "claude-sonnet-4-5", "anthropic"),
    ("claude", "claude-via-chat", "chat"),
    ("codex", "gpt-5.5", "chat"),
    ("codex", "gpt-via-anthropic", "anthropic"),
]


def in_flight(value):
    """The sum of every `in_flight` count in a quota report."""
    if isinstance(value, dict):
        own = value.get("in_flight") if isinstance(value.get("in_flight"), int) else 0
        return own + sum(in_flight(v) for k, v in value.items() if k != "in_flight" or
                         not isinstance(v, int))
    if isinstance(value, list):
        return sum(in_flight(v) for v in value)
    return 0


def quota(base):
    req = urllib.request.Request(base + "/v1/quota", headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req, timeout=10) as answer:
        return json.load(answer)


def tool_result_reached(mock, since):
    """Whether a request after the first `since` carried the marker as a tool's result."""
    for req in mock.requests[since:]:
        body = json.dumps(req.get("body") or {})
        if common.MARKER in body and ("tool_result" in body or '"role": "tool"' in body):
            return True
    return False


def usage_records(llmroute, config, env):
    """The usage report (`llmroute usage --json --by model`)."""
    out = subprocess.run([llmroute, "--config", config, "usage", "--json", "--by", "model"],
                         env=env, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("llmroute")
    parser.add_argument("bin_dir", help="where npm put `claude` and `codex`")
    parser.add_argument("--only", choices=["claude", "codex"])
    args = parser.parse_args()
    runs = [r for r in RUNS if args.only in (None, r[0])]
    work = tempfile.mkdtemp(prefix="llmroute-agents-")
    problems = []
    with MockServer("anthropic") as anthropic, MockServer("chat") as chat:
        mocks = {"anthropic": anthropic, "chat": chat}
        config = os.path.join(work, "providers.yaml")
        with open(config, "w") as f:
            f.write(CONFIG.format(anthropic=anthropic.url, chat=chat.url,
                                  key_hash=hashlib.sha256(KEY.encode()).hexdigest()))
        secrets = (UPSTREAM_KEY, KEY)
        with serving(args.llmroute, config, secrets, AGENT_UPSTREAM_KEY=UPSTREAM_KEY) as gateway:
            base = gateway.base
            for agent, model, upstream in runs:
                mock = mocks[upstream]
                since = len(mock.requests)
                binary = os.path.join(os.path.abspath(args.bin_dir), agent)
                run = run_claude if agent == "claude" else run_codex
                rc, answer, out, err = run(base, KEY, binary, model)
                found = common.check(rc, answer, out, err)
                if not tool_result_reached(mock, since):
                    found.append(f"no tool result reached the {upstream} upstream")
                if len(mock.requests) == since:
                    found.append(f"the {upstream} upstream was never called")
                print(f"{agent} via {model} ({upstream}): {'FAILED' if found else 'ok'}"
                      f" ({len(mock.requests) - since} upstream calls), answer {answer!r}")
                problems += [f"{agent}/{model}: {p}" for p in found]
            if not args.only:
                sdks = subprocess.run(["node", "sdk_ts.mjs", base, KEY], cwd=HERE,
                                      capture_output=True, text=True, timeout=120)
                print(sdks.stdout.strip() or sdks.stderr.strip()[-2000:])
                if sdks.returncode != 0:
                    problems.append(f"sdk_ts.mjs: {sdks.stdout[-1000:]} {sdks.stderr[-2000:]}")
            left = in_flight(quota(base))
            if left:
                problems.append(f"{left} requests still in flight after the agents finished")
        calls = len([r for m in mocks.values() for r in m.requests
                     if r["path"].split("?")[0] in ("/v1/messages", "/v1/chat/completions")])
        state = dict(os.environ, LLMROUTE_STATE_DIR=os.path.join(work, "state"))
        report = usage_records(args.llmroute, config, state)
        totals = report.get("totals", {})
        if totals.get("requests") != calls:
            problems.append(f"usage records: {totals.get('requests')} requests, {calls} calls")
        if not totals.get("prompt_tokens") or not totals.get("cost_micros"):
            problems.append(f"usage records lack tokens or cost: {totals}")
    for problem in problems:
        print("FAIL:", problem)
    print("through_gateway: " + ("FAILED" if problems else f"{len(runs)} agent round trips ok"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
