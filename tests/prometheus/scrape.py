"""The alert rules and the dashboard against a real Prometheus scraping a real gateway.

Starts a mock OpenAI-compatible upstream (stdlib http.server) and `llmroute serve`, makes a few
chat requests (one streamed), then starts `prometheus` on a free loopback port with its own
storage, scraping the gateway's /metrics every second and loading
deploy/prometheus/llmroute.rules.yml. It checks that Prometheus counts the requests made, that
the rules' group is loaded and every rule evaluates without error, and that every query of
deploy/grafana/llmroute.json runs. Everything started is stopped at the end. Only the standard
library is used.

Usage: python3 scrape.py PATH/TO/llmroute
"""

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

from gateway_process import serving  # noqa: E402

RULES = os.path.join(ROOT, "deploy", "prometheus", "llmroute.rules.yml")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "llmroute.json")
KEY = "llmr-prometheus-test-key"
USAGE = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
WHOLE, STREAMED = 3, 1
TIMEOUT_SECS = 30


class Upstream(BaseHTTPRequestHandler):
    """Answers /v1/chat/completions, whole or streamed."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        base = {"id": "chatcmpl-up", "model": body["model"], "created": 0}
        if body.get("stream"):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            chunk = dict(base, object="chat.completion.chunk")
            for delta, finish in [({"content": "Hello"}, None), ({}, "stop")]:
                event = dict(chunk, choices=[{"index": 0, "delta": delta, "finish_reason": finish}])
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            self.wfile.write(f"data: {json.dumps(dict(chunk, choices=[], usage=USAGE))}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            return
        message = {"role": "assistant", "content": "Hello from upstream"}
        answer = dict(base, object="chat.completion", usage=USAGE,
                      choices=[{"index": 0, "message": message, "finish_reason": "stop"}])
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def chat(base, stream):
    """One chat request through the gateway; its whole body."""
    body = {"model": "chat", "messages": [{"role": "user", "content": "Hi"}], "stream": stream}
    request = urllib.request.Request(
        base + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
        headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200, response.status
        return response.read().decode()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(prometheus, path, **query):
    """GET a Prometheus API path; its `data`, or the error it answered."""
    url = f"{prometheus}{path}?{urllib.parse.urlencode(query)}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            answer = json.load(response)
    except urllib.error.HTTPError as e:
        answer = json.load(e)
    if answer.get("status") != "success":
        raise RuntimeError(f"{path} {query}: {answer.get('errorType')}: {answer.get('error')}")
    return answer["data"]


def wait_for(what, check, log):
    """Calls `check` until it returns a true value, for up to TIMEOUT_SECS."""
    deadline = time.monotonic() + TIMEOUT_SECS
    last = None
    while time.monotonic() < deadline:
        try:
            got = check()
            if got:
                return got
            last = "not yet"
        except (OSError, RuntimeError) as e:
            last = e
        time.sleep(0.5)
    with open(log) as f:
        tail = f.read()[-3000:]
    raise SystemExit(f"scrape: {what}: not within {TIMEOUT_SECS} s (last: {last})\n"
                     f"prometheus log:\n{tail}")


def requests_counted(prometheus, expected):
    result = api(prometheus, "/api/v1/query", query="sum(llmroute_requests_total)")["result"]
    if not result:
        raise RuntimeError("no llmroute_requests_total scraped yet")
    got = float(result[0]["value"][1])
    if got != expected:
        raise RuntimeError(f"sum(llmroute_requests_total) is {got}")
    return True


def rules_ok(prometheus):
    """The llmroute group's rules once all were evaluated: None before."""
    groups = api(prometheus, "/api/v1/rules")["groups"]
    group = next((g for g in groups if g["name"] == "llmroute"), None)
    if group is None or any(r["health"] == "unknown" for r in group["rules"]):
        return None
    bad = [(r["name"], r["health"], r.get("lastError")) for r in group["rules"] if r["health"] != "ok"]
    if bad:
        raise SystemExit(f"scrape: rules that do not evaluate: {bad}")
    return group["rules"]


def dashboard_queries():
    """Every panel's query, with Grafana's variables given values Prometheus takes."""
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    queries = []

    def walk(v):
        if isinstance(v, dict):
            for key, value in v.items():
                if key == "expr" and isinstance(value, str):
                    queries.append(value)
                else:
                    walk(value)
        elif isinstance(v, list):
            for item in v:
                walk(item)

    walk(dashboard["panels"])
    subs = {"$__rate_interval": "1m", "$__range": "5m", "$job": ".*"}
    for name, value in subs.items():
        queries = [q.replace(name, value) for q in queries]
    return queries


def main(llmroute):
    if shutil.which("prometheus") is None:
        raise SystemExit("scrape: prometheus is not on PATH")
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    work = tempfile.mkdtemp()
    config = os.path.join(work, "providers.yaml")
    with open(config, "w") as f:
        f.write(f"""
defaults: {{ model: chat }}
providers:
  - name: up
    api: openai
    base_url: http://127.0.0.1:{upstream.server_address[1]}/v1
    api_key_env: UP_KEY
    models:
      - {{ name: small, aliases: [chat], price: {{ input: 1, output: 2 }}, limits: {{ rpm: 1000 }} }}
tenants:
  tiers: {{ team: {{}} }}
  members: {{ acme: team }}
gateway:
  keys:
    - {{ sha256: {hashlib.sha256(KEY.encode()).hexdigest()}, tenant: acme }}
""")
    prometheus = None
    try:
        with serving(llmroute, config, secrets=("S3CRET", KEY), UP_KEY="sk-upstream-S3CRET") as gateway:
            for _ in range(WHOLE):
                assert "Hello from upstream" in chat(gateway.base, stream=False)
            for _ in range(STREAMED):
                assert chat(gateway.base, stream=True).endswith("data: [DONE]\n\n")

            port = free_port()
            target = gateway.base.removeprefix("http://")
            with open(os.path.join(work, "prometheus.yml"), "w") as f:
                f.write(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {RULES}
scrape_configs:
  - job_name: llmroute
    static_configs:
      - targets: ["{target}"]
""")
            log = os.path.join(work, "prometheus.log")
            with open(log, "w") as out:
                prometheus = subprocess.Popen(
                    ["prometheus", f"--config.file={work}/prometheus.yml",
                     f"--storage.tsdb.path={work}/tsdb", f"--web.listen-address=127.0.0.1:{port}"],
                    stdout=out, stderr=subprocess.STDOUT)
            url = f"http://127.0.0.1:{port}"

            wait_for(f"sum(llmroute_requests_total) == {WHOLE + STREAMED}",
                     lambda: requests_counted(url, WHOLE + STREAMED), log)
            rules = wait_for("the llmroute rules evaluated", lambda: rules_ok(url), log)
            firing = [r["name"] for r in rules if r.get("alerts")]
            assert not firing, f"alerts on a healthy gateway: {firing}"
            queries = dashboard_queries()
            for query in queries:
                api(url, "/api/v1/query", query=query)
    finally:
        if prometheus is not None:
            prometheus.send_signal(signal.SIGTERM)
            try:
                prometheus.wait(timeout=30)
            except subprocess.TimeoutExpired:
                prometheus.kill()
                prometheus.wait()
        upstream.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    print(f"scrape: Prometheus counted {WHOLE + STREAMED} requests; {len(rules)} rules evaluated "
          f"with health ok; {len(queries)} dashboard queries ran: ok")


if __name__ == "__main__":
    main(sys.argv[1])
