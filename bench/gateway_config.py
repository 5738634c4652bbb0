"""The configuration of `llmroute serve` for the benchmark: the harness's bench providers (cheap,
mid, premium) at the mock, each serving alias `chat` with its limits and prices, the ledger in
the run's Redis, and `x-bench-id` passed on so the mock attributes each attempt.

Usage: gateway_config.py PROVIDERS_JSON MOCK_URL REDIS_HOST:PORT > gateway.yaml

With LLMROUTE_BENCH_LEASE set (e.g. `auto`), every deployment gets that `lease:`.
"""

import json
import os
import sys


def main():
    providers_json, mock, redis = sys.argv[1:4]
    with open(providers_json) as f:
        providers = json.load(f)["providers"]
    lines = [f"state: redis://{redis}/0", "gateway:", "  forward_headers: [x-bench-id]", "providers:"]
    for name in ("cheap", "mid", "premium"):
        p = providers[name]
        limits = ", ".join(f"{k}: {p[k]}" for k in ("rpm", "tpm") if p.get(k))
        lines += [
            f"  - name: {name}",
            "    api: openai",
            f"    base_url: {mock}/p/{name}/v1",
            "    api_key_env: BENCH_KEY",
            "    models:",
            f"      - name: {name}",
            "        aliases: [chat]",
            f"        price: {{ input: {p['price_in']}, output: {p['price_out']} }}",
            f"        limits: {{ {limits} }}",
        ]
        if os.environ.get("LLMROUTE_BENCH_LEASE"):
            lines.append(f"        lease: {os.environ['LLMROUTE_BENCH_LEASE']}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
