"""A phase's figures, over single-attempt successes (the client got 200 at its first try, and
the mock saw one attempt for that request):
  router-added = client latency - the mock's service time (request read whole to last byte
                 written); TTFB-added = client time to first SSE event - the mock's time to it
  overhead     = gateway router-added - direct router-added, at the same percentile
  upstream 429 = what the mock refused; client errors = requests that failed in the end
  gateway CPU  = (utime + stime) of the gateway process over the phase / client requests
"""

import math


def pct(values, q):
    """The q-th percentile (nearest rank), or None."""
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q / 100 * len(v)) - 1))]


def single_attempts(rec):
    """[(client row, mock entry)] of the requests that succeeded at one attempt."""
    attempts = {}
    for e in rec["mock_log"]:
        attempts.setdefault(e.get("bench_id"), []).append(e)
    single = []
    for r in rec["rows"]:
        a = attempts.get(r["bench_id"], [])
        if r["ok"] and r["attempts"] == 1 and len(a) == 1 and a[0].get("status") == 200:
            single.append((r, a[0]))
    return single


def analyse(rec):
    """Per-request figures of a phase (single-attempt successes)."""
    if rec.get("skipped"):
        return None
    kind = rec["scenario"]["kind"]
    fam = rec["mock_stats"]["anthropic" if kind == "messages" else "openai"]
    single = single_attempts(rec)
    lat = [r["latency_ms"] for r, _ in single]
    added = [r["latency_ms"] - e["service_ms"] for r, e in single]
    ttfb = [r["ttfb_ms"] for r, _ in single]
    ttfb_added = [r["ttfb_ms"] - e["ttfb_ms"] for r, e in single]
    rows = rec["rows"]
    ok = [r for r in rows if r["ok"]]
    out = {
        "requests": len(rows), "upstream_attempts": len(rec["mock_log"]), "ok": len(ok),
        "single": len(single), "errors": len(rows) - len(ok),
        "client_429": sum(r["n429"] for r in rows), "upstream_429": fam["rejected_429"],
        "rejected_by": fam["rejected_by"],
        "lat": (pct(lat, 50), pct(lat, 99)), "added": (pct(added, 50), pct(added, 99)),
        "ttfb": (pct(ttfb, 50), pct(ttfb, 99)),
        "ttfb_added": (pct(ttfb_added, 50), pct(ttfb_added, 99)),
        "added_by_id": {r["bench_id"]: r["latency_ms"] - e["service_ms"] for r, e in single},
        "prompt_by_id": {e["bench_id"]: e.get("prompt_tokens") for e in rec["mock_log"]
                         if e.get("status") == 200},
        "limits": fam["limits"], "peak": fam["peak_window"],
        "whole_prompt_peak": fam["peak_window_whole_prompt"],
        "client_cpu_s": rec["summary"]["client_cpu_s"], "elapsed_s": rec["summary"]["elapsed_s"],
        "loop_lag_p99": rec["summary"]["loop_lag_p99_ms"], "mock_cpu_s": rec["mock_cpu_s"],
        "gateway_cpu_s": rec.get("gateway_cpu_s"),
        "loadavg": (rec.get("loadavg_start"), rec.get("loadavg_end")),
    }
    if kind == "messages":
        cache_figures(rec, ok, out)
    wait = metric_hist(rec.get("metrics", ""), "llmroute_admission_wait_seconds")
    out["admission_wait"] = wait
    return out


def cache_figures(rec, ok, out):
    """The share of prompt tokens read from the cache; prompts the token rule miscounted."""
    cache = rec["mock_stats"]["cache"]
    tot = cache.get("read", 0) + cache.get("creation", 0) + cache.get("input", 0)
    out["cache_read_share"] = cache.get("read", 0) / tot if tot else None
    out["rule_mismatch"] = sum(
        1 for r in ok if r.get("expected_prompt") is not None
        and out["prompt_by_id"].get(r["bench_id"]) not in (None, r["expected_prompt"]))


def metric_hist(text, name):
    """(count, sum) of a Prometheus histogram in `text`, or None."""
    count = total = None
    for line in text.splitlines():
        if line.startswith(name + "_count"):
            count = float(line.split()[-1])
        elif line.startswith(name + "_sum"):
            total = float(line.split()[-1])
    return (count, total) if count is not None else None
