"""The report's table, one row per phase, and the notes under it."""

from run_analysis import analyse, pct

HEAD = ("| run | path | requests (client / upstream) | turns ok | latency p50 / p99 ms "
        "| router-added p50 / p99 ms | **overhead** p50 / p99 ms | TTFB p50 / p99 ms "
        "| TTFB-added p50 / p99 ms | **TTFB overhead** p50 / p99 ms | upstream 429 "
        "| client errors (429s retried) | peak ITPM / OTPM or TPM used (limit) "
        "| cache reads | gateway CPU ms/req |")


def f2(x):
    return "–" if x is None else f"{x:.2f}"


def f0(x):
    return "–" if x is None else f"{x:.0f}"


def pair(a, fmt=f2):
    return f"{fmt(a[0])} / {fmt(a[1])}"


def cell(x):
    """An overhead figure: "–" as is, else two decimals."""
    return x if isinstance(x, str) else f2(x)


def table(records):
    """(the markdown table, its notes) of the phases' records."""
    lines = [HEAD, "|" + "---|" * (HEAD.count("|") - 1)]
    notes = []
    by = {}
    for rec in records:
        by.setdefault(rec["name"], {})[rec["path"]] = rec
    for name, paths in by.items():
        direct = paths.get("direct")
        da = analyse(direct) if direct else None
        for path in ("direct", "gateway"):
            rec = paths.get(path)
            if rec is None:
                continue
            if rec.get("skipped"):
                lines.append(f"| {name} | {path} | skipped: {rec['skipped']} |" + " |" * 12)
                continue
            a = analyse(rec)
            lines.append(row(name, path, rec, a, da))
            notes.append(f"- {name} {path}: " + "; ".join(phase_notes(path, rec, a, da)))
    return "\n".join(lines), "\n".join(notes)


def overheads(a, da):
    """(overhead, TTFB overhead) at p50 and p99: gateway minus direct."""
    ov = tuple(None if x is None or y is None else x - y
               for x, y in zip(a["added"], da["added"]))
    tov = tuple(None if x is None or y is None else x - y
                for x, y in zip(a["ttfb_added"], da["ttfb_added"]))
    return ov, tov


def row(name, path, rec, a, da):
    """One phase's row."""
    ov = tov = ("–", "–")
    if path == "gateway" and da:
        ov, tov = overheads(a, da)
    if rec["scenario"]["kind"] == "messages":
        peak = (f"{a['peak']['itpm'] / 1000:.0f}k ({a['limits']['itpm'] / 1000:.0f}k) / "
                f"{a['peak']['otpm'] / 1000:.0f}k ({a['limits']['otpm'] / 1000:.0f}k)")
        cache = f"{a['cache_read_share'] * 100:.1f} %" if a["cache_read_share"] else "–"
    else:
        peak = f"{a['peak']['tpm'] / 1e6:.1f}M ({a['limits']['tpm'] / 1e6:.0f}M)"
        cache = "–"
    cpu = (f"{a['gateway_cpu_s'] * 1000 / a['requests']:.2f}"
           if a["gateway_cpu_s"] is not None and a["requests"] else "–")
    rej = (" (" + ", ".join(f"{k} {v}" for k, v in a["rejected_by"].items()) + ")"
           if a["rejected_by"] else "")
    return (f"| {name} | {path} | {a['requests']} / {a['upstream_attempts']} | {a['ok']} "
            f"| {pair(a['lat'], f0)} | {pair(a['added'])} "
            f"| {cell(ov[0])} / {cell(ov[1])} "
            f"| {pair(a['ttfb'], f0)} | {pair(a['ttfb_added'])} "
            f"| {cell(tov[0])} / {cell(tov[1])} "
            f"| {a['upstream_429']}{rej} | {a['errors']} ({a['client_429']}) | {peak} "
            f"| {cache} | {cpu} |")


def phase_notes(path, rec, a, da):
    """The notes on one phase: client and mock CPU, load, whole-prompt peak, token rule..."""
    extra = [f"{a['single']} single-attempt successes",
             f"client CPU {a['client_cpu_s'] / a['elapsed_s'] * 100:.0f} % of a core, "
             f"event-loop lag p99 {a['loop_lag_p99']:.1f} ms",
             f"mock CPU {a['mock_cpu_s'] * 1000 / max(1, a['upstream_attempts']):.2f} "
             "ms/attempt",
             f"load average {a['loadavg'][0][0]} at the start, {a['loadavg'][1][0]} "
             "at the end"]
    if rec["scenario"]["kind"] == "messages":
        extra.append(f"whole-prompt ITPM peak {a['whole_prompt_peak'] / 1e6:.1f}M "
                     f"(= {a['whole_prompt_peak'] / a['limits']['itpm']:.1f}x ITPM)")
        if path == "direct":
            extra.append(f"token rule: {a['rule_mismatch']} prompts differ from "
                         "workload.py's count")
    if path == "gateway" and da:
        extra += gateway_notes(rec, a, da)
    return extra


def gateway_notes(rec, a, da):
    """A gateway phase against its direct one: shared prompts, paired overhead, waits."""
    extra = []
    same = [i for i in a["prompt_by_id"] if i in da["prompt_by_id"]]
    eq = sum(1 for i in same if a["prompt_by_id"][i] == da["prompt_by_id"][i])
    paired = [a["added_by_id"][i] - da["added_by_id"][i] for i in a["added_by_id"]
              if i in da["added_by_id"]]
    extra.append(f"{len(same)} requests in both runs, {eq} with the same prompt "
                 "tokens at the mock")
    if paired:
        extra.append(f"paired overhead (same request id) p50 {pct(paired, 50):.2f} "
                     f"p99 {pct(paired, 99):.2f} ms over {len(paired)}")
    if a["admission_wait"]:
        c, s = a["admission_wait"]
        extra.append(f"gateway admission waits: {s:.1f} s in all over {c:.0f} "
                     "requests")
        slow = [x for x in a["added_by_id"].values() if x > 1000]
        if slow:
            extra.append(f"{len(slow)} requests waited over 1 s in the gateway "
                         f"(longest {max(slow) / 1000:.1f} s)")
    return extra + ledger_notes(rec["series"])


def ledger_notes(series):
    """The ledger's OTPM and ITPM against the mock's windows, where it was polled."""
    extra = []
    gap = [p["ledger"]["otpm"]["used"] - p["mock"]["otpm"] for p in series
           if isinstance(p.get("ledger"), dict) and "otpm" in p["ledger"]]
    if gap:
        extra.append(f"ledger OTPM minus the mock's window, sampled each second: "
                     f"mean {sum(gap) / len(gap) / 1000:+.0f}k, max "
                     f"{max(gap) / 1000:+.0f}k, min {min(gap) / 1000:+.0f}k")
    gap = [p["ledger"]["itpm"]["used"] - p["mock"]["itpm"] for p in series
           if isinstance(p.get("ledger"), dict) and "itpm" in p["ledger"]]
    if gap:
        extra.append(f"ledger ITPM minus the mock's: mean "
                     f"{sum(gap) / len(gap) / 1000:+.0f}k, min "
                     f"{min(gap) / 1000:+.0f}k")
    return extra
