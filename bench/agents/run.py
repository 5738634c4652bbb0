#!/usr/bin/env python3
"""The agent benchmark: Claude Code- and Codex-shaped sessions straight to a rate-limited mock,
then through `llmroute serve`, same seed; one markdown table.

  python3 bench/agents/run.py --quick          # msg-k4 and resp-k4, 20 s each way: under 2 minutes
  python3 bench/agents/run.py                  # msg-k4, msg-k16, msg-k16-tight, resp-k4: ~11 min
  python3 bench/agents/run.py --llmroute PATH --no-build --out DIR --seed 1 --ledger redis

Builds `cargo build --profile dist -p router-cli` first (unless --no-build or --llmroute), uses
`${CARGO_TARGET_DIR:-target}/dist/llmroute`. Starts its own mock (mock_anthropic.py) and, per
gateway phase, its own `llmroute serve --no-auth` on free loopback ports, with a fresh state
directory (the embedded SQLite ledger and usage file: `llmroute serve` has no in-memory ledger)
or, with --ledger redis, its own throwaway redis-server. Every process it starts is stopped on
exit, normal or not; children also get SIGTERM if this script dies (PR_SET_PDEATHSIG), and the
mock stops by itself after --exit-after seconds.

Each scenario (run_scenarios.py) runs twice with the same seed, `direct` and `gateway`
(run_phase.py); the figures are computed in run_analysis.py, tabled in run_table.py.
Results go to --out (default a new temporary directory): report.md, and per phase its rows,
the mock's log and stats, the gateway's configuration, log, metrics and a ledger-vs-mock
time series (ledger.jsonl: `llmroute quota --json` and the mock's window, every second).
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

from run_phase import run_phase
from run_procs import REPO, cleanup
from run_report import report
from run_scenarios import FULL, QUICK, SCENARIOS
from run_services import start_mock, start_redis


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="msg-k4 and resp-k4, 20 s each way")
    p.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                   help="run these only (repeatable)")
    p.add_argument("--duration", type=float, help="seconds per phase (default 20 quick, 75)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--llmroute", help="the llmroute binary (implies --no-build)")
    p.add_argument("--no-build", action="store_true")
    p.add_argument("--ledger", choices=("embedded", "redis"), default="embedded")
    p.add_argument("--limiter", choices=("window", "bucket"), default="window",
                   help="the mock's limiter: exact 60 s sliding window, or Anthropic's bucket")
    p.add_argument("--no-ratelimit-headers", action="store_true",
                   help="the mock sends no anthropic-ratelimit-* / x-ratelimit-* headers (a "
                        "diagnostic: the gateway then has only its own ledger to go by)")
    p.add_argument("--watch-ledger", dest="watch_ledger", action="store_true", default=None,
                   help="poll `llmroute quota --json` every second in every gateway phase "
                        "(default: in msg-k16-tight only)")
    p.add_argument("--no-watch-ledger", dest="watch_ledger", action="store_false")
    p.add_argument("--gateway-verbose", action="store_true", help="run the gateway with -v")
    p.add_argument("--out", help="results directory (default: a new temporary one)")
    p.add_argument("--exit-after", type=float, default=3600)
    return p.parse_args()


def find_binary(args):
    """The llmroute binary: --llmroute, or the dist build (built first unless --no-build)."""
    if not args.llmroute:
        target = os.environ.get("CARGO_TARGET_DIR", "target")
        if not os.path.isabs(target):
            target = os.path.join(REPO, target)
        args.llmroute = os.path.join(target, "dist", "llmroute")
        if not args.no_build:
            subprocess.run(["cargo", "build", "--profile", "dist", "-p", "router-cli"],
                           cwd=REPO, check=True)
    if not os.access(args.llmroute, os.X_OK):
        raise SystemExit(f"run.py: no llmroute at {args.llmroute} (drop --no-build?)")


def run_all(args, scenarios, mock, redis, out_dir):
    """Every scenario's direct then gateway phase; their records."""
    records = []
    for name in scenarios:
        for path in ("direct", "gateway"):
            records.append(run_phase(args, name, SCENARIOS[name], path, mock, redis,
                                     out_dir))
            if records[-1].get("skipped"):
                print(f"   skipped: {records[-1]['skipped']}", flush=True)
    return records


def main():
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)   # even if started with it ignored
    scenarios = args.scenario or (QUICK if args.quick else FULL)
    if args.duration is None:
        args.duration = 20 if args.quick else 75
    find_binary(args)
    out_dir = os.path.abspath(args.out or tempfile.mkdtemp(prefix="llmroute-agents."))
    os.makedirs(out_dir, exist_ok=True)
    print(f"results: {out_dir}", flush=True)
    try:
        mock = start_mock(args, out_dir)
        redis = start_redis(out_dir) if args.ledger == "redis" else None
        print(f"mock {mock}, ledger {redis and 'redis ' + redis or 'embedded (SQLite)'}, "
              f"limiter {args.limiter}, llmroute {args.llmroute}", flush=True)
        t_begin = time.time()
        records = run_all(args, scenarios, mock, redis, out_dir)
        elapsed = time.time() - t_begin
        text = report(args, scenarios, records, elapsed, out_dir)
        with open(os.path.join(out_dir, "report.md"), "w") as f:
            f.write(text)
        print()
        print(text)
    finally:
        cleanup()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        cleanup()
        sys.exit(130)
