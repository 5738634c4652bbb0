"""The configuration of `llmroute serve` for one case of the gateway board (bench/board.sh).

Usage: board_config.py CASE NOW_URL SLOW_URL REDIS_HOST:PORT KEY > gateway.yaml

Two deployments of one provider account each, limits far above what the board sends (so every
request runs the admission and none is refused): model `now` at the mock that answers at once
(NOW_URL), model `slow` at the one that answers after 20 ms (SLOW_URL). CASE chooses the store:

  memory       `state: memory` (this process only)
  embedded     no `state`: the embedded SQLite store in $LLMROUTE_STATE_DIR (the CLI's default)
  redis        `state: redis://REDIS/0`: one Redis admission per request
  redis-lease  the same with `lease: auto` on both deployments
  redis-keyed  the same as redis, with a `gateway.keys` entry (SHA-256 of KEY) for tenant `board`,
               whose tier has limits (as high)
  redis-keyed-lease  the same as redis-keyed, with `lease: auto` on the tier and on both
               deployments: the keyed counterpart of redis-lease
  redis-open   `state` Redis, but no limits on either deployment: no limit concerns a request,
               so none calls the store (cooldowns are still shared)
"""

import hashlib
import sys

CASES = ("memory", "embedded", "redis", "redis-lease", "redis-keyed", "redis-keyed-lease",
         "redis-open")
LIMITS = "{ rpm: 10000000, tpm: 100000000000 }"


def deployment(name, url, lease, limited):
    lines = [
        f"  - name: {name}-up",
        "    api: openai",
        f"    base_url: {url}/v1",
        "    api_key_env: BOARD_UPSTREAM_KEY",
        "    models:",
        f"      - name: {name}",
        "        price: { input: 1, output: 2 }",
    ]
    if limited:
        lines.append(f"        limits: {LIMITS}")
    if lease:
        lines.append("        lease: auto")
    return lines


def config(case, now, slow, redis, key):
    if case not in CASES:
        raise SystemExit(f"board_config.py: unknown case {case!r}; one of {', '.join(CASES)}")
    lines = ["defaults: { model: now }"]
    if case == "memory":
        lines.append("state: memory")
    elif case.startswith("redis"):
        lines += [f"state: redis://{redis}/0", f"namespace: board-{case}"]
    lines.append("providers:")
    lease = case in ("redis-lease", "redis-keyed-lease")
    limited = case != "redis-open"
    lines += deployment("now", now, lease, limited)
    lines += deployment("slow", slow, lease, limited)
    if case.startswith("redis-keyed"):
        digest = hashlib.sha256(key.encode()).hexdigest()
        tier = LIMITS[:-2] + ", lease: auto }" if case == "redis-keyed-lease" else LIMITS
        lines += [
            "tenants:",
            f"  tiers: {{ roomy: {tier} }}",
            "  members: { board: roomy }",
            "gateway:",
            "  keys:",
            f"    - {{ sha256: {digest}, tenant: board }}",
        ]
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) != 6:
        raise SystemExit(__doc__.strip().splitlines()[2])
    sys.stdout.write(config(*sys.argv[1:6]))


if __name__ == "__main__":
    main()
