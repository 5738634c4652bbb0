#!/usr/bin/env python3
"""CPU of one `llmroute chat` call, beside `curl` posting the same request (stdlib only).

    python3 bench/cli_cpu.py [--llmroute target/dist/llmroute] [--runs 50] [--rounds 3]

Starts the harness's mock upstream (`../shared/bench/mock_upstream.py`, or
$LLMROUTE_BENCH_HARNESS) on a free port and a configuration of one OpenAI-compatible
deployment on its unlimited `warmup` provider, with the embedded store and the state directory
in a temporary HOME. Each round runs `llmroute chat --no-stream --max-tokens 16 -p FILE` RUNS
times with its usage record written to the default SQLite file, RUNS times with
`LLMROUTE_USAGE=none`, and `curl` RUNS times with the same request straight to the mock, and
prints each one's CPU per run: user + system time of the finished children (`getrusage`), so
process start-up, configuration, the ledger and the call are all in it.
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "Why is the sky blue? " * 20


def children_cpu_ms():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r.ru_utime + r.ru_stime) * 1000


def start_mock(harness, work):
    port_file = os.path.join(work, "port")
    mock = subprocess.Popen(
        [sys.executable, os.path.join(harness, "mock_upstream.py"), "--config",
         os.path.join(harness, "providers.json"), "--port", "0", "--port-file", port_file,
         "--exit-after", "900"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            with open(port_file) as f:
                url = f"http://127.0.0.1:{int(f.read().strip())}"
            urllib.request.urlopen(url + "/healthz", timeout=1)
            return mock, url
        except (OSError, ValueError):
            if mock.poll() is not None:
                break
            time.sleep(0.1)
    mock.kill()
    raise SystemExit(f"cli_cpu.py: the mock upstream did not start ({harness}/mock_upstream.py)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llmroute", default=os.path.join(REPO, "target", "dist", "llmroute"))
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    harness = os.environ.get("LLMROUTE_BENCH_HARNESS", os.path.join(REPO, "..", "shared", "bench"))
    if not os.path.exists(args.llmroute):
        raise SystemExit(f"cli_cpu.py: no llmroute at {args.llmroute}; build it with "
                         "`cargo build --profile dist -p router-cli` or give --llmroute")
    if shutil.which("curl") is None:
        raise SystemExit("cli_cpu.py: curl is not installed")
    work = tempfile.mkdtemp(prefix="llmroute-cli-cpu.")
    mock, url = start_mock(harness, work)
    try:
        config = os.path.join(work, "providers.yaml")
        with open(config, "w") as f:
            f.write(f"""providers:
  - name: warmup
    api: openai
    base_url: {url}/p/warmup/v1
    api_key_env: BENCH_KEY
    models:
      - name: warmup
        aliases: [chat]
        price: {{ input: 0.1, output: 0.1 }}
defaults:
  model: chat
""")
        prompt = os.path.join(work, "prompt.txt")
        with open(prompt, "w") as f:
            f.write(PROMPT)
        body = json.dumps({"model": "warmup", "messages": [{"role": "user", "content": PROMPT}],
                           "max_tokens": 16}).encode()
        env = dict(os.environ, BENCH_KEY="sk-bench", HOME=work,
                   XDG_STATE_HOME=os.path.join(work, "state"), XDG_DATA_HOME=os.path.join(work, "data"),
                   XDG_CONFIG_HOME=os.path.join(work, "config"))
        env.pop("LLMROUTE_USAGE", None)
        for name in ("REDIS_URL", "LLMROUTE_STATE_DIR"):
            env.pop(name, None)
        chat = [args.llmroute, "--config", config, "chat", "--no-stream", "--max-tokens", "16", "-p", prompt]
        curl = ["curl", "-sS", "--fail", "-X", "POST", f"{url}/p/warmup/v1/chat/completions",
                "-H", "content-type: application/json", "--data-binary", "@-"]

        def per_run(argv, extra=None, n=args.runs):
            before = children_cpu_ms()
            for _ in range(n):
                done = subprocess.run(argv, env=dict(env, **(extra or {})), input=body,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                if done.returncode != 0:
                    raise SystemExit(f"cli_cpu.py: {' '.join(argv[:3])} ... failed: "
                                     f"{done.stderr.decode(errors='replace').strip()}")
            return (children_cpu_ms() - before) / n

        per_run(chat, n=3)  # the embedded store and the usage file are created here
        for i in range(args.rounds):
            a = per_run(chat)
            b = per_run(chat, {"LLMROUTE_USAGE": "none"})
            c = per_run(curl)
            print(f"round {i + 1}: llmroute chat {a:.1f} ms, with LLMROUTE_USAGE=none {b:.1f} ms, "
                  f"curl {c:.1f} ms of CPU per run")
    finally:
        mock.terminate()
        mock.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
