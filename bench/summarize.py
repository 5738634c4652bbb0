#!/usr/bin/env python3
"""Router overhead against the harness floor, from finished runs' summary.json (stdlib only).

    python3 bench/summarize.py --floor OUT/floor-k4 [--floor OUT/floor-2-k4] OUT/llmroute-k1 ...

The floor is a run of `bench_worker --floor`: no router, a bare HTTP client posting straight to
one provider. Its "router-added" latency (client latency minus the mock's service time) is what
the harness, the loopback and an HTTP client add by themselves. A router's overhead is its own
router-added latency minus the floor's, at the same percentile. Both use single-attempt
successes (`router_added_ms_single_attempt`), the figure report.py shows. With several floor
runs, each run is compared with the floor run that finished nearest in time to it (by its
summary.json's modification time): a VM's speed can change by half within minutes, and a floor
measured ten minutes earlier would put that change into the router's figures.

    python3 bench/summarize.py --cpu-pairs F1 R1 R2 F2 F3 R3

CPU per request of floor and router runs made one after the other (run.sh --cpu makes them in
that order, floor-router-router-floor-floor-router): each run's figure, each arm's median, and
each adjacent floor/router pair's difference, so that drift of the machine during the runs
(other load, frequency) weighs on both arms alike.

    python3 bench/summarize.py --tails OUT/floor-k4 OUT/llmroute-k4 ...

The slow end of each run's router-added latency, from its per_request.csv (single-attempt
successes, percentiles interpolated as the harness does): p50, p99, p99.5, the slowest, and how
many requests took over 2 and over 3 ms. A p99 is the 6th-slowest of 600 requests; these say
whether a run's few stalls fell on its p99 or the whole tail moved.
"""
import argparse
import csv
import json
import math
import os
import sys


def load(d):
    with open(os.path.join(d, "summary.json")) as f:
        return json.load(f)


def fmt(x, nd=2):
    return "n/a" if x is None else f"{x:.{nd}f}"


def minus(a, b):
    return None if a is None or b is None else a - b


def scripts_per_request(d, s):
    """Redis script calls (EVALSHA and EVAL, inside none counted) per request, from the
    scripts.json run.sh writes after a run; warm-up requests are in the count, not the divisor."""
    path = os.path.join(d, "scripts.json")
    if not os.path.exists(path):
        return "n/a"
    with open(path) as f:
        calls = json.load(f).get("script_calls")
    return "n/a" if calls is None else f"{calls / max(1, s['requests']):.2f}"


def cpu_of(d):
    """(label, CPU ms per request, is it a floor run) of a finished run, or None."""
    if not os.path.exists(os.path.join(d, "summary.json")):
        return None
    doc = load(d)
    cpu = doc["summary"].get("router_cpu", {}).get("ms_per_request")
    label = doc["meta"].get("label", d)
    return None if cpu is None else (label, cpu, label.startswith("floor"))


def cpu_pairs(runs):
    """The --cpu-pairs table; runs in the order they were made, paired two by two."""
    print("| run (in the order made) | CPU ms/req | router - its pair's floor, ms/req |")
    print("|---|---|---|")
    floors, routers, gaps = [], [], []
    for i in range(0, len(runs), 2):
        pair = [cpu_of(d) for d in runs[i:i + 2]]
        floor = next((p for p in pair if p and p[2]), None)
        for d, p in zip(runs[i:i + 2], pair):
            if p is None:
                print(f"| {os.path.basename(d.rstrip('/'))} | missing | |")
                continue
            gap = ""
            if not p[2] and floor:
                gap = f"{p[1] - floor[1]:+.2f}"
                gaps.append(p[1] - floor[1])
            (floors if p[2] else routers).append(p[1])
            print(f"| {p[0]} | {p[1]:.2f} | {gap} |")

    def median(xs):
        xs = sorted(xs)
        n = len(xs)
        return None if n == 0 else (xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2)

    mf, mr = median(floors), median(routers)
    print()
    print(f"floor median {fmt(mf)} ms/req over {len(floors)} runs, router median {fmt(mr)} over "
          f"{len(routers)}: router - floor = {fmt(minus(mr, mf))} ms/req; pairs' differences "
          f"{', '.join(f'{g:+.2f}' for g in gaps) or 'none'}, mean "
          f"{fmt(sum(gaps) / len(gaps) if gaps else None)}")


def pct(xs, q):
    """The q-quantile of sorted xs, interpolated as the harness's benchlib.pct does."""
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def tails(runs):
    """The --tails table."""
    print("| run | n | router-added ms p50 / p99 / p99.5 / max | over 2 ms | over 3 ms |")
    print("|---|---|---|---|---|")
    for d in runs:
        path = os.path.join(d, "per_request.csv")
        name = os.path.basename(d.rstrip("/"))
        if not os.path.exists(path):
            print(f"| {name} | missing: the run failed, see its worker*.log | | | |")
            continue
        if os.path.exists(os.path.join(d, "summary.json")):
            name = load(d)["meta"].get("label", name)
        with open(path, newline="") as f:
            xs = sorted(float(r["router_added_ms"]) for r in csv.DictReader(f)
                        if r["ok"] == "True" and r["upstream_attempts"] == "1" and r["router_added_ms"])
        if not xs:
            print(f"| {name} | 0 | | | |")
            continue
        qs = " / ".join(fmt(pct(xs, q)) for q in (0.5, 0.99, 0.995)) + f" / {fmt(xs[-1])}"
        print(f"| {name} | {len(xs)} | {qs} | {sum(x > 2 for x in xs)} | {sum(x > 3 for x in xs)} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--floor", action="append", default=[],
                    help="a floor run's directory (repeatable: each run is compared with the nearest in time)")
    ap.add_argument("--cpu-pairs", action="store_true",
                    help="compare CPU per request of alternated floor and router runs (see above)")
    ap.add_argument("--tails", action="store_true",
                    help="the slow end of each run's router-added latency (see above)")
    ap.add_argument("runs", nargs="+", help="run directories (those without summary.json are listed as missing)")
    args = ap.parse_args()
    if args.cpu_pairs:
        cpu_pairs(args.runs)
        return
    if args.tails:
        tails(args.runs)
        return
    floors = []  # (finished at, label, router-added percentiles) of each floor run
    for d in args.floor:
        path = os.path.join(d, "summary.json")
        if os.path.exists(path):
            doc = load(d)
            floors.append((os.path.getmtime(path), doc["meta"].get("label", d),
                           doc["summary"]["router_added_ms_single_attempt"],
                           doc["summary"].get("router_cpu", {}).get("ms_per_request")))

    def nearest_floor(d):
        when = os.path.getmtime(os.path.join(d, "summary.json"))
        return min(floors, key=lambda f: abs(f[0] - when)) if floors else None
    hdr = ["run", "mock", "ok/failed", "router-added ms p50 / p99", "overhead vs floor ms p50 / p99",
           "upstream 429 (enforce) / would-be 429 (observe)", "cost/oracle", "CPU ms/req (vs floor)", "redis cmds/req",
           "script calls/req"]
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for d in args.floor:
        if not os.path.exists(os.path.join(d, "summary.json")):
            print(f"| {os.path.basename(d.rstrip('/'))} (floor) | missing: the run failed, see its worker*.log | "
                  + "| " * (len(hdr) - 2))
    for _, label, fl, fcpu in floors:
        print(f"| {label} (reference) | | | {fmt(fl['p50'])} / {fmt(fl['p99'])} | 0 / 0 | | | "
              f"{'n/a' if fcpu is None else fcpu} | | |")
    for d in args.runs:
        if not os.path.exists(os.path.join(d, "summary.json")):
            print(f"| {os.path.basename(d.rstrip('/'))} | missing: the run failed, see its worker*.log | "
                  + "| " * (len(hdr) - 2))
            continue
        doc = load(d)
        s, m = doc["summary"], doc["meta"]
        ra = s["router_added_ms_single_attempt"]
        mode = m.get("mock_mode", "?")
        near = nearest_floor(d)
        floor = near[2] if near else None
        over = (f"{fmt(minus(ra['p50'], floor['p50']))} / {fmt(minus(ra['p99'], floor['p99']))}"
                if floor else "n/a (no floor run)")
        if floor and len(floors) > 1:
            over += f" (vs {near[1]})"
        rejected = s["upstream_would_reject_429"] if mode == "observe" else s["upstream_429"]
        cpu = s.get("router_cpu", {}).get("ms_per_request")
        cpu_cell = "n/a" if cpu is None else str(cpu)
        if cpu is not None and near and near[3] is not None:
            cpu_cell += f" ({cpu - near[3]:+.2f})"
        print("| " + " | ".join([
            m.get("label", d), mode, f"{s['succeeded']}/{s['failed']}",
            f"{fmt(ra['p50'])} / {fmt(ra['p99'])}", over,
            f"{rejected} ({'would-be' if mode == 'observe' else 'real'})",
            "n/a" if s.get("cost_vs_oracle") is None else str(s["cost_vs_oracle"]),
            cpu_cell,
            str(s.get("redis_commands_per_request", "n/a")),
            scripts_per_request(d, s),
        ]) + " |")
    if not floors:
        print("\n(no floor run with a summary.json: overhead not computed)", file=sys.stderr)


if __name__ == "__main__":
    main()
