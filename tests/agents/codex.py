"""Drive the real Codex CLI through one shell-tool round trip against an OpenAI Responses API.

    python3 codex.py --base-url URL --key KEY --bin PATH/TO/codex [--model M]
    python3 codex.py --direct-mock --bin PATH/TO/codex [--capture-dir DIR]

Writes a throwaway CODEX_HOME/config.toml whose custom model provider `llmroute` points at
URL/v1 (`wire_api = "responses"`, so Codex calls POST URL/v1/responses) with the key in the
env var LLMROUTE_API_KEY (sent as `Authorization: Bearer`), then runs `codex exec` in a
throwaway working directory with no approvals and no sandbox, and checks that it exits 0 and
that its final message (`--output-last-message`) holds `llmroute-tool-ok`. --direct-mock starts
the reference Responses mock of mock_upstreams.py and points Codex straight at it, then also
checks that the tool output reached the mock. Exit status 0 when all checks pass.
"""

import argparse
import json
import os
import sys
import tempfile

import agent_common as common
from mock_upstreams import MockServer

CONFIG = """\
{model}model_provider = "llmroute"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.llmroute]
name = "llmroute"
base_url = "{base_url}/v1"
wire_api = "responses"
env_key = "LLMROUTE_API_KEY"
request_max_retries = 1
stream_max_retries = 1
stream_idle_timeout_ms = 60000
"""


def run_codex(base_url, key, binary, model="gpt-5.5", timeout=120, extra_args=()):
    """Run `codex exec` once; returns (exit status or None, final message, stdout, stderr)."""
    with tempfile.TemporaryDirectory(prefix="llmroute-codex-") as tmp:
        home, work = os.path.join(tmp, "codex-home"), os.path.join(tmp, "work")
        os.makedirs(home)
        os.makedirs(work)
        with open(os.path.join(home, "config.toml"), "w") as f:
            f.write(CONFIG.format(model=f'model = "{model}"\n' if model else "",
                                base_url=base_url.rstrip("/")))
        last = os.path.join(tmp, "last-message.txt")
        env = common.clean_env(tmp, {"CODEX_HOME": home, "LLMROUTE_API_KEY": key})
        cmd = [binary, "exec", "--skip-git-repo-check", "--ephemeral", "--json", "--color", "never",
               "--dangerously-bypass-approvals-and-sandbox", "-C", work, "-o", last,
               *extra_args, common.PROMPT]
        rc, out, err = common.run(cmd, env, work, timeout)
        answer = open(last).read() if os.path.exists(last) else None
    return rc, answer, out, err


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, help="path to the codex executable")
    parser.add_argument("--base-url", help="OpenAI API base, without /v1")
    parser.add_argument("--key", default="llmroute-agent-test-key")
    parser.add_argument("--model", default="gpt-5.5", help="'' for Codex's default")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--direct-mock", action="store_true", help="run against the mock upstream")
    parser.add_argument("--capture-dir", help="with --direct-mock: save each request here")
    parser.add_argument("extra", nargs="*", help="more `codex exec` arguments (after --)")
    args = parser.parse_args()
    if not args.direct_mock and not args.base_url:
        parser.error("--base-url or --direct-mock is required")

    if not args.direct_mock:
        rc, answer, out, err = run_codex(args.base_url, args.key, args.bin, args.model,
                                         args.timeout, args.extra)
        problems = common.check(rc, answer, out, err)
    else:
        with MockServer("responses") as mock:
            rc, answer, out, err = run_codex(mock.url, args.key, args.bin, args.model,
                                             args.timeout, args.extra)
        problems = common.check(rc, answer, out, err)
        if args.capture_dir:
            common.save_captures(mock.requests, args.capture_dir)
        outputs = [json.dumps(item) for r in mock.requests if r["path"].startswith("/v1/responses")
                   for item in (r["body"] or {}).get("input", [])
                   if isinstance(item, dict) and item.get("type", "").endswith("_call_output")]
        if not any(common.MARKER in o for o in outputs):
            problems.append("no tool output with the marker reached the mock")
    print(f"codex answer: {answer!r}")
    for problem in problems:
        print("FAIL:", problem)
    print("codex: " + ("FAILED" if problems else "passed"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
