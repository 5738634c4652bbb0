"""The gateway under test: its configuration, `llmroute serve` started and stopped, its ledger."""

import json
import os
import subprocess
import time

from run_procs import start, stop
from run_scenarios import CHAT_OUTPUT_CAP, anthropic_limits, openai_limits


def gateway_yaml(mock, limits_a, limits_o, redis):
    """One Anthropic and one OpenAI-compatible deployment at the mock, x-bench-id passed on."""
    la = ", ".join(f"{k}: {v}" for k, v in limits_a.items())
    lo = ", ".join(f"{k.replace('chat_', '')}: {v}" for k, v in limits_o.items())
    lines = []
    if redis:
        lines.append(f"state: redis://{redis}/0")
    lines += [
        "gateway:",
        "  forward_headers: [x-bench-id]",
        "providers:",
        "  - name: anthropic",
        "    api: anthropic",
        f"    base_url: {mock}",
        "    api_key_env: BENCH_KEY",
        "    models:",
        "      - name: claude-sonnet-4-5",
        "        price: { input: 3, output: 15, cached_input: 0.3 }",
        "        max_output_tokens: 64000",
        "        capabilities: [tools, vision, json_schema, reasoning]",
        f"        limits: {{ {la} }}",
        "  - name: openai",
        "    api: openai",
        f"    base_url: {mock}/v1",
        "    api_key_env: BENCH_KEY",
        "    models:",
        "      - name: gpt-5.1-codex",
        "        price: { input: 1.25, output: 10, cached_input: 0.125 }",
        f"        max_output_tokens: {CHAT_OUTPUT_CAP}",
        "        capabilities: [tools, json_schema, reasoning]",
        f"        limits: {{ {lo} }}",
    ]
    return "\n".join(lines) + "\n"


class Gateway:
    """`llmroute serve --no-auth` on a free loopback port, with a fresh state directory."""

    def __init__(self, args, d, mock, scenario, redis):
        self.args, self.dir = args, d
        self.cfg = os.path.join(d, "gateway.yaml")
        self.state = os.path.join(d, "state")
        os.makedirs(self.state, exist_ok=True)
        with open(self.cfg, "w") as f:
            f.write(gateway_yaml(mock, anthropic_limits(scenario), openai_limits(scenario),
                                 redis))
        self.env = dict(os.environ, BENCH_KEY="bench", LLMROUTE_STATE_DIR=self.state)
        self.env.pop("REDIS_URL", None)
        self.out = open(os.path.join(d, "gateway.out"), "w")
        self.err = open(os.path.join(d, "gateway.log"), "w")
        verbose = ["-v"] if args.gateway_verbose else []
        self.p = start("gateway", [args.llmroute, "--config", self.cfg, *verbose, "serve",
                                   "--no-auth", "--listen", "127.0.0.1:0"],
                       stdout=self.out, stderr=self.err, env=self.env)
        self.url = self._listening()
        if not self.url:
            raise SystemExit(f"run.py: the gateway did not start (see {d}/gateway.log)")

    def _listening(self):
        """The URL the gateway printed once listening, or None if it exited or took 10 s."""
        for _ in range(200):
            with open(os.path.join(self.dir, "gateway.out")) as f:
                line = f.readline()
            if line.startswith("llmroute gateway listening on "):
                return line.split(" on ", 1)[1].strip()
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        return None

    def quota(self):
        """`llmroute quota --json`, or {"error": ...}."""
        try:
            out = subprocess.run([self.args.llmroute, "--config", self.cfg, "quota", "--json"],
                                 env=self.env, capture_output=True, timeout=5, text=True)
            return json.loads(out.stdout) if out.returncode == 0 else {"error": out.stderr[-300:]}
        except (subprocess.TimeoutExpired, ValueError) as e:
            return {"error": str(e)}

    def stop(self):
        stop(self.p)
        self.out.close()
        self.err.close()
