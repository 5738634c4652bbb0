"""Seeded agent sessions over raw HTTP/1.1 (asyncio streams, keep-alive, stdlib only).

Two shapes:

* `messages` (Claude Code): POST /v1/messages, streamed, thinking, 12 tools, a cached system
  prompt (workload_claude.py).
* `responses` (Codex): POST /v1/responses, streamed, `store: false`, function tools
  (workload_codex.py).

K session slots run in parallel, turns back to back, for --duration seconds or until
--max-turns turns in all; 429s and 529s are retried after their `retry-after`
(workload_run.py). Timing, per request: latency from the first byte written to the last byte of
the stream read; TTFB to the first SSE event (workload_http.py). Output: one JSON row per
request (--out, JSONL) and a summary line on stdout.

  python3 workload.py --url http://127.0.0.1:PORT --kind messages -k 4 --duration 60 --seed 1 \
      --out rows.jsonl
"""

import argparse
import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workload_run import Run, pct  # noqa: E402  (siblings, and the mock's token rule)


def span(s):
    lo, _, hi = s.partition(":")
    return (int(lo), int(hi or lo))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True, help="base URL without /v1 (the mock or the gateway)")
    p.add_argument("--kind", choices=("messages", "responses"), default="messages")
    p.add_argument("-k", type=int, default=4, help="sessions in parallel")
    p.add_argument("--duration", type=float, default=60, help="seconds; no turn starts after")
    p.add_argument("--max-turns", type=int, default=0, help="turns in all (0: no cap)")
    p.add_argument("--session-turns", type=int, default=25, help="turns per session")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--model", default="claude-sonnet-4-5")
    p.add_argument("--responses-model", default="gpt-5.1-codex")
    p.add_argument("--max-tokens", type=int, default=32000)
    p.add_argument("--thinking-budget", type=int, default=16000)
    p.add_argument("--system-chars", type=int, default=80000)
    p.add_argument("--session-chars", type=int, default=6000,
                   help="of the system prompt, the per-session part (CLAUDE.md)")
    p.add_argument("--instructions-chars", type=int, default=6000)
    p.add_argument("--developer-chars", type=int, default=17000)
    p.add_argument("--prompt-chars", type=span, default=(100, 2000))
    p.add_argument("--result-chars", type=span, default=(200, 20000))
    p.add_argument("--tool-overhead-tokens", type=int, default=346)
    p.add_argument("--retries", type=int, default=10)
    p.add_argument("--request-timeout", type=float, default=300)
    p.add_argument("--out", help="JSONL file for the per-request rows")
    return p.parse_args(argv)


def main():
    args = parse_args()
    run = Run(args)
    elapsed, cpu = asyncio.run(run.main())
    rows = run.rows
    if args.out:
        with open(args.out, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    ok = [r for r in rows if r["ok"]]
    summary = {"kind": args.kind, "k": args.k, "requests": len(rows), "ok": len(ok),
               "errors": len(rows) - len(ok), "n429": sum(r["n429"] for r in rows),
               "elapsed_s": round(elapsed, 2), "client_cpu_s": round(cpu, 2),
               "loop_lag_p99_ms": round(pct(run.lag, 99) or 0, 2),
               "loop_lag_max_ms": round(max(run.lag, default=0), 2),
               "latency_p50_ms": pct([r["latency_ms"] for r in ok], 50)}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    sys.exit(main())
