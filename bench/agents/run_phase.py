"""One phase: a scenario's workload, straight to the mock (`direct`) or through the gateway.

Each scenario runs twice with the same seed: `direct` (the workload to the mock) and `gateway`
(the workload to the gateway, the gateway to the mock). Before each phase the mock is reset
(limits, windows, cache, log); one small warm-up request goes first on the path measured. The
Responses scenario's gateway phase is skipped, said so in the table, when the gateway answers
404 on /v1/responses.
"""

import json
import os
import subprocess
import sys
import time

from run_gateway import Gateway
from run_http import get_json, http
from run_procs import HERE, cpu_ticks, start
from run_scenarios import CHAT_OUTPUT_CAP, anthropic_limits, openai_limits
from run_services import flush_redis


def run_phase(args, name, scenario, path, mock, redis, out_dir):
    """One phase: returns its record (rows, mock log and stats, gateway CPU...) or a skip."""
    d = os.path.join(out_dir, f"{name}-{path}")
    os.makedirs(d, exist_ok=True)
    kind = scenario["kind"]
    reset = mock_reset(args, scenario)
    http("POST", mock + "/reset", reset)
    gw = None
    rec = {"name": name, "path": path, "scenario": scenario, "dir": d}
    if path == "gateway":
        gw = open_gateway(args, d, mock, scenario, redis, rec)
        if gw is None:
            return rec
        target = gw.url
    else:
        target = mock
    w = warmup(target, kind)
    if w != 200:
        print(f"   warm-up answered {w}", flush=True)
    http("POST", mock + "/reset", reset)
    t_cpu = gw and cpu_ticks(gw.p.pid)
    mock_cpu0 = get_json(mock + "/stats")["cpu_s"]
    series = run_workload(args, name, scenario, path, target, mock, gw, d, rec)
    time.sleep(0.5)     # let the last settlements land
    if gw is not None:
        gateway_figures(gw, t_cpu, d, rec)
    collect(rec, mock, mock_cpu0, series, d)
    s = rec["summary"]
    fam = rec["mock_stats"]["anthropic" if kind == "messages" else "openai"]
    print(f"   {s['ok']}/{s['requests']} ok, upstream 429 {fam['rejected_429']}, "
          f"client errors {s['errors']}", flush=True)
    return rec


def mock_reset(args, scenario):
    """The mock's /reset body: both accounts' limits, the limiter, the headers."""
    reset = dict(anthropic_limits(scenario))
    reset.update(openai_limits(scenario))
    reset.update(limiter=args.limiter, chat_output_cap=CHAT_OUTPUT_CAP,
                 no_ratelimit_headers=args.no_ratelimit_headers)
    return reset


def open_gateway(args, d, mock, scenario, redis, rec):
    """A fresh gateway (redis flushed first), or None with rec["skipped"] set."""
    if redis:
        flush_redis(redis)
    gw = Gateway(args, d, mock, scenario, redis)
    if scenario["kind"] == "responses":
        status, body = http("POST", gw.url + "/v1/responses", {})
        if status == 404:
            gw.stop()
            rec["skipped"] = ("the gateway answers 404 on POST /v1/responses: "
                              + body[:160].decode("utf-8", "replace"))
            return None
    return gw


def warmup(url, kind):
    """One small request on the path measured; its status."""
    if kind == "messages":
        body = {"model": "claude-sonnet-4-5", "max_tokens": 16,
                "messages": [{"role": "user", "content": "Say hi"}]}
        return http("POST", url + "/v1/messages", body, headers={
            "x-api-key": "bench", "anthropic-version": "2023-06-01", "x-bench-id": "warmup"})[0]
    body = {"model": "gpt-5.1-codex", "input": "Say hi", "max_output_tokens": 16}
    return http("POST", url + "/v1/responses", body,
                headers={"authorization": "Bearer bench", "x-bench-id": "warmup"})[0]


def run_workload(args, name, scenario, path, target, mock, gw, d, rec):
    """workload.py to its end, the windows sampled each second; the samples."""
    kind = scenario["kind"]
    cmd = [sys.executable, os.path.join(HERE, "workload.py"), "--url", target, "--kind", kind,
           "-k", str(scenario["k"]), "--duration", str(args.duration), "--seed", str(args.seed),
           "--out", os.path.join(d, "rows.jsonl")]
    print(f"== {name} {path}: {scenario['what']}, {args.duration:g} s  "
          f"(from {time.strftime('%H:%M:%S', time.gmtime())} UTC)", flush=True)
    wl_out = open(os.path.join(d, "workload.out"), "w")
    wl = start("workload", cmd, stdout=wl_out, stderr=subprocess.STDOUT)
    series = []
    rec["loadavg_start"] = open("/proc/loadavg").read().split()[:3]
    t0 = time.time()
    while wl.poll() is None:
        time.sleep(1.0)
        series.append(sample(args, scenario, mock, gw, t0))
    wl_out.close()
    rec["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
    return series


def sample(args, scenario, mock, gw, t0):
    """The mock's window now and, where watched, the gateway's ledger."""
    kind = scenario["kind"]
    fam = "anthropic" if kind == "messages" else "openai"
    point = {"t": round(time.time() - t0, 2),
             "mock": get_json(mock + "/stats")[fam]["window_now"]}
    if gw is not None and (args.watch_ledger or (args.watch_ledger is None
                                                 and scenario.get("watch"))):
        q = gw.quota()
        dep = [x for x in q.get("deployments", [])
               if x.get("provider") == ("anthropic" if kind == "messages" else "openai")]
        point["ledger"] = dep[0] if dep else q
    return point


def gateway_figures(gw, t_cpu, d, rec):
    """The gateway's CPU over the phase and its /metrics; then it is stopped."""
    t1 = cpu_ticks(gw.p.pid)
    rec["gateway_cpu_s"] = (t1 - t_cpu) / os.sysconf("SC_CLK_TCK")
    try:
        rec["metrics"] = http("GET", gw.url + "/metrics")[1].decode()
        with open(os.path.join(d, "metrics.txt"), "w") as f:
            f.write(rec["metrics"])
    except OSError:
        rec["metrics"] = ""
    gw.stop()


def collect(rec, mock, mock_cpu0, series, d):
    """The workload's summary and rows, the mock's log and stats; written to the phase dir."""
    with open(os.path.join(d, "workload.out")) as f:
        lines = f.read().strip().splitlines()
    try:
        rec["summary"] = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise SystemExit(f"run.py: the workload failed (see {d}/workload.out)")
    rec["rows"] = [json.loads(x) for x in open(os.path.join(d, "rows.jsonl"))]
    rec["mock_log"] = get_json(mock + "/requests")
    rec["mock_stats"] = get_json(mock + "/stats")
    rec["mock_cpu_s"] = rec["mock_stats"]["cpu_s"] - mock_cpu0
    rec["series"] = series
    for fname, obj in (("mock_requests.json", rec["mock_log"]), ("mock_stats.json",
                                                                  rec["mock_stats"])):
        with open(os.path.join(d, fname), "w") as f:
            json.dump(obj, f)
    with open(os.path.join(d, "ledger.jsonl"), "w") as f:
        for p in series:
            f.write(json.dumps(p) + "\n")
