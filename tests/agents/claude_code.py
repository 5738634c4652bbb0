"""Drive the real Claude Code CLI through one shell-tool round trip against an Anthropic API.

    python3 claude_code.py --base-url URL --key KEY --bin PATH/TO/claude [--model M]
    python3 claude_code.py --direct-mock --bin PATH/TO/claude [--capture-dir DIR]

Runs `claude -p PROMPT --output-format json` in a throwaway working directory and HOME, with
only the Bash tool pre-approved, and checks that it exits 0 and that its final answer holds
`llmroute-tool-ok`. URL is what Claude Code gets as ANTHROPIC_BASE_URL (it appends
/v1/messages). The key goes in ANTHROPIC_API_KEY (sent as `x-api-key`), or with --bearer in
ANTHROPIC_AUTH_TOKEN (sent as `Authorization: Bearer`). --direct-mock starts the mock Anthropic
upstream of mock_upstreams.py and points Claude Code straight at it, then also checks that the
tool result reached the mock. Exit status 0 when all checks pass.
"""

import argparse
import json
import sys
import tempfile

import agent_common as common
from mock_upstreams import MockServer


def run_claude(base_url, key, binary, model="claude-sonnet-4-5", bearer=False, timeout=120,
               extra_args=()):
    """Run Claude Code once; returns (exit status or None, final answer, stdout, stderr)."""
    with tempfile.TemporaryDirectory(prefix="llmroute-claude-") as tmp:
        env = common.clean_env(tmp, {
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_AUTH_TOKEN" if bearer else "ANTHROPIC_API_KEY": key,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
        })
        cmd = [binary, "-p", common.PROMPT, "--output-format", "json",
               "--allowedTools", "Bash", "--no-session-persistence", *extra_args]
        if model:
            cmd += ["--model", model]
        rc, out, err = common.run(cmd, env, tmp, timeout)
    try:
        answer = json.loads(out.strip().splitlines()[-1]).get("result")
    except (ValueError, IndexError, AttributeError):
        answer = None
    return rc, answer, out, err


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, help="path to the claude executable")
    parser.add_argument("--base-url", help="Anthropic API base, without /v1")
    parser.add_argument("--key", default="llmroute-agent-test-key")
    parser.add_argument("--bearer", action="store_true", help="send the key as a Bearer token")
    parser.add_argument("--model", default="claude-sonnet-4-5", help="'' for Claude Code's default")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--direct-mock", action="store_true", help="run against the mock upstream")
    parser.add_argument("--capture-dir", help="with --direct-mock: save each request here")
    parser.add_argument("extra", nargs="*", help="more claude arguments (after --)")
    args = parser.parse_args()
    if not args.direct_mock and not args.base_url:
        parser.error("--base-url or --direct-mock is required")

    if not args.direct_mock:
        rc, answer, out, err = run_claude(args.base_url, args.key, args.bin, args.model,
                                          args.bearer, args.timeout, args.extra)
        problems = common.check(rc, answer, out, err)
    else:
        with MockServer("anthropic") as mock:
            rc, answer, out, err = run_claude(mock.url, args.key, args.bin, args.model,
                                              args.bearer, args.timeout, args.extra)
        problems = common.check(rc, answer, out, err)
        if args.capture_dir:
            common.save_captures(mock.requests, args.capture_dir)
        results = [json.dumps(m) for r in mock.requests if r["path"].startswith("/v1/messages")
                   for m in (r["body"] or {}).get("messages", []) if "tool_result" in json.dumps(m)]
        if not any(common.MARKER in m for m in results):
            problems.append("no tool_result with the marker reached the mock")
    print(f"claude answer: {answer!r}")
    for problem in problems:
        print("FAIL:", problem)
    print("claude_code: " + ("FAILED" if problems else "passed"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
