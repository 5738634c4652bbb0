"""The gateway board's tables, from the JSON bench/board.sh's loadgen runs wrote.

Usage: board.py OUT CASE...

For each case (a directory of OUT): the added latency at concurrency 1 (the rounds' samples
pooled, gateway and floor alike: p50 and p99 of the gateway's minus the same of the floor's),
the added time to a stream's first byte the same way, requests per second and the added p50 /
p99 at 32 and 128 connections on the 20 ms mock, the gateway's CPU per request (at concurrency
1 and at 32 connections) and its resident memory after the last run. Then each target of the
board (bench/README.md) against those figures: met or not. Standard library only.
"""

import glob
import json
import math
import os
import sys

LABELS = {
    "proxy": "reference: `bare-proxy` (no router)",
    "memory": "memory (`state: memory`)",
    "embedded": "embedded (SQLite)",
    "redis": "Redis",
    "redis-lease": "Redis, `lease: auto`",
    "redis-keyed": "Redis, keyed tenant",
    "redis-keyed-lease": "Redis, keyed tenant, tier and deployments `lease: auto`",
    "redis-open": "Redis, no limit on the deployments",
}


def percentile(samples, p):
    """Nearest rank, as loadgen computes it."""
    ordered = sorted(samples)
    rank = math.ceil(p / 100 * len(ordered))
    return ordered[min(max(rank, 1), len(ordered)) - 1]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def failures(runs):
    return sum(sum(r.get("failures", {}).values()) for r in runs)


def pooled(out, case, phase, side, key):
    """p50 and p99 in ms of the samples `key` of every round of `phase`; the runs."""
    runs = [load(p) for p in sorted(glob.glob(os.path.join(out, case, f"{phase}-*-{side}.json")))]
    runs = [r for r in runs if r]
    samples = [s for r in runs for s in r.get(key, [])]
    if not samples:
        return None, runs
    return (percentile(samples, 50) / 1000, percentile(samples, 99) / 1000), runs


def cpu_per_request(runs):
    watched = [r["process"] for r in runs if r.get("process")]
    requests = sum(r["requests"] for r in runs if r.get("process"))
    if not watched or not requests:
        return None
    return sum(w["cpu_ms"] for w in watched) / requests


def rounds_figure(out, case, phase, key):
    """Added p50 / p99 over the floor, the floor's, the gateway's CPU per request, failures."""
    gateway, gruns = pooled(out, case, phase, "gateway", key)
    floor, fruns = pooled(out, case, phase, "floor", key)
    if gateway is None or floor is None:
        return None
    return {
        "added": (gateway[0] - floor[0], gateway[1] - floor[1]),
        "floor": floor,
        "cpu": cpu_per_request(gruns),
        "failures": failures(gruns) + failures(fruns),
    }


def load_figure(out, case, phase):
    """Requests per second, share of direct, added p50 / p99, the floor's, CPU per request."""
    gateway = load(os.path.join(out, case, f"{phase}-gateway.json"))
    floor = load(os.path.join(out, case, f"{phase}-floor.json"))
    if not gateway or not floor or not gateway.get("latency_ms") or not floor.get("latency_ms"):
        return None
    g, f = gateway["latency_ms"], floor["latency_ms"]
    return {
        "rps": gateway["rps"],
        "floor_rps": floor["rps"],
        "share": gateway["rps"] / floor["rps"] if floor["rps"] else 0.0,
        "added": (g["p50"] - f["p50"], g["p99"] - f["p99"]),
        "floor": (f["p50"], f["p99"]),
        "cpu": cpu_per_request([gateway]),
        "rss_kib": (gateway.get("process") or {}).get("rss_kib"),
        "failures": failures([gateway, floor]),
    }


def figures(out, case):
    if os.path.exists(os.path.join(out, case, "skipped")):
        return None
    return {
        "c1": rounds_figure(out, case, "c1", "samples_us"),
        "stream": rounds_figure(out, case, "stream", "first_byte_samples_us"),
        "c32": load_figure(out, case, "c32"),
        "c128": load_figure(out, case, "c128"),
    }


def ms(x):
    return "–" if x is None else f"{x:+.3f}" if x < 0 else f"{x:.3f}"


def failed(fig):
    return f" ({fig['failures']} failed)" if fig and fig["failures"] else ""


def cell_rounds(fig):
    if not fig:
        return "–"
    (a50, a99), (f50, f99) = fig["added"], fig["floor"]
    return f"{ms(a50)} / {ms(a99)} (floor {f50:.3f} / {f99:.3f}){failed(fig)}"


def cell_load(fig):
    if not fig:
        return "–"
    (a50, a99), (f50, f99) = fig["added"], fig["floor"]
    return (f"{fig['rps']:.0f} of {fig['floor_rps']:.0f} ({100 * fig['share']:.1f} %); "
            f"{ms(a50)} / {ms(a99)} (floor {f50:.2f} / {f99:.2f}){failed(fig)}")


def cell_cpu(figs):
    c1 = figs["c1"] and figs["c1"]["cpu"]
    c32 = figs["c32"] and figs["c32"]["cpu"]
    return f"{ms(c1)} / {ms(c32)}"


def cell_rss(figs):
    rss = [figs[k]["rss_kib"] for k in ("c128", "c32") if figs[k] and figs[k]["rss_kib"]]
    return f"{rss[0] / 1024:.1f}" if rss else "–"


def table(out, cases):
    rows = [
        "| case | c=1 added p50 / p99, ms | stream first byte added p50 / p99, ms | "
        "c=32, 20 ms mock: req/s of direct; added p50 / p99, ms | c=128, the same | "
        "CPU ms / request, c=1 / c=32 | RSS after, MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for case in cases:
        figs = figures(out, case)
        if figs is None:
            rows.append(f"| {LABELS[case]} | not run: the gateway did not start (see "
                        f"{case}/gateway.log) | | | | | |")
            continue
        rows.append(
            f"| {LABELS[case]} | {cell_rounds(figs['c1'])} | {cell_rounds(figs['stream'])} | "
            f"{cell_load(figs['c32'])} | {cell_load(figs['c128'])} | {cell_cpu(figs)} | "
            f"{cell_rss(figs)} |")
    return rows


def check(figs, what, get, bound):
    """(figure, met) for figure `get` of case figures `figs`, against `bound` (at most)."""
    try:
        value = get(figs)
    except (KeyError, TypeError):
        value = None
    if value is None:
        return "–", "not measured"
    return value, "met" if value <= bound else "not met"


def targets(out, cases):
    figs = {c: figures(out, c) for c in cases}
    c1 = lambda i: lambda f: f["c1"]["added"][i]  # noqa: E731
    first = lambda i: lambda f: f["stream"]["added"][i]  # noqa: E731
    cpu = lambda f: f["c1"]["cpu"]  # noqa: E731
    load50 = lambda n: lambda f: f[f"c{n}"]["added"][0]  # noqa: E731
    short = lambda n: lambda f: 1 - f[f"c{n}"]["share"]  # noqa: E731
    wanted = [
        ("redis", "c=1 added p50 ≤ 0.1 ms", c1(0), 0.1),
        ("redis", "c=1 added p99 ≤ 0.3 ms", c1(1), 0.3),
        ("redis-keyed", "c=1 added p50 ≤ 0.1 ms", c1(0), 0.1),
        ("redis-keyed", "c=1 added p99 ≤ 0.3 ms", c1(1), 0.3),
        ("redis-lease", "c=1 added p50 ≤ 0.05 ms", c1(0), 0.05),
        ("redis-lease", "c=1 added p99 ≤ 0.15 ms", c1(1), 0.15),
        ("memory", "c=1 added p50 ≤ 0.05 ms", c1(0), 0.05),
        ("memory", "c=1 added p99 ≤ 0.15 ms", c1(1), 0.15),
        ("redis-open", "c=1 added p50 ≤ 0.05 ms", c1(0), 0.05),
        ("redis-open", "c=1 added p99 ≤ 0.15 ms", c1(1), 0.15),
        ("embedded", "c=1 added p99 ≤ 0.5 ms", c1(1), 0.5),
        ("redis", "stream first byte added p50 ≤ 0.2 ms", first(0), 0.2),
        ("redis", "stream first byte added p99 ≤ 0.4 ms", first(1), 0.4),
        ("redis-lease", "CPU ≤ 0.05 ms / request (c=1)", cpu, 0.05),
        ("redis", "CPU ≤ 0.1 ms / request (c=1)", cpu, 0.1),
        ("redis", "c=32 added p50 ≤ 0.3 ms", load50(32), 0.3),
        ("redis", "c=32 throughput ≥ 95 % of direct", short(32), 0.05),
        ("redis", "c=128 added p50 ≤ 0.3 ms", load50(128), 0.3),
        ("redis", "c=128 throughput ≥ 95 % of direct", short(128), 0.05),
    ]
    rows = ["| case | target | figure | | beyond `bare-proxy` |", "|---|---|---|---|---|"]
    for case, what, get, bound in wanted:
        if case not in figs:
            continue
        if figs[case] is None:
            rows.append(f"| {LABELS[case]} | {what} | – | not run | |")
            continue
        value, verdict = check(figs[case], what, get, bound)
        shown = value if isinstance(value, str) else (
            f"{100 * (1 - value):.1f} %" if "throughput" in what else f"{ms(value)} ms")
        rows.append(f"| {LABELS[case]} | {what} | {shown} | {verdict} | "
                    f"{beyond_proxy(figs, value, get, what)} |")
    rows += keyed_row(figs)
    return rows


def beyond_proxy(figs, value, get, what):
    """The figure less the same figure of `bare-proxy` in this run: what the router adds beyond
    one more hop and a JSON parse on this machine. Blank without the proxy case."""
    proxy = figs.get("proxy")
    if not proxy or isinstance(value, str):
        return ""
    base, _ = check(proxy, what, get, 0)
    if isinstance(base, str):
        return ""
    if "throughput" in what:
        return f"{100 * (base - value):+.1f} points"
    return f"{ms(value - base)} ms"


def keyed_row(figs):
    """Keyed against no keys: exact on Redis against Redis, and leased (tier and deployments)
    against leased deployments without keys: the differences of c=1 added p50 and CPU."""
    rows = []
    for keyed_case, plain_case, label in (
        ("redis-keyed", "redis", "Redis, keyed tenant"),
        ("redis-keyed-lease", "redis-lease", "Redis, keyed tenant, tier leasing"),
    ):
        keyed, plain = figs.get(keyed_case), figs.get(plain_case)
        if not keyed or not plain or not keyed["c1"] or not plain["c1"]:
            continue
        dp50 = keyed["c1"]["added"][0] - plain["c1"]["added"][0]
        dcpu = (keyed["c1"]["cpu"] or 0) - (plain["c1"]["cpu"] or 0)
        verdict = "met" if dp50 <= 0.02 and dcpu <= 0.01 else "not met"
        rows.append(f"| {label} | as fast as no keys (`{plain_case}`; c=1 added p50 within "
                    f"0.02 ms, CPU within 0.01 ms) | p50 {dp50:+.3f} ms, CPU {dcpu:+.3f} ms | "
                    f"{verdict} | |")
    return rows


def main():
    if len(sys.argv) < 3:
        raise SystemExit("usage: board.py OUT CASE...")
    out, cases = sys.argv[1], sys.argv[2:]
    unknown = [c for c in cases if c not in LABELS]
    if unknown:
        raise SystemExit(f"board.py: unknown cases {unknown}; known: {', '.join(LABELS)}")
    print("\n".join(table(out, cases)))
    print()
    print("\n".join(targets(out, cases)))


if __name__ == "__main__":
    main()
