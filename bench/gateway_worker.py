"""The harness's reference worker, pointed at `llmroute serve` instead of the mock.

Rewrites every provider's `api_base` in the worker spec to the gateway's base URL and runs
`naive_worker.py --policy fixed:<a provider>` on it: each request goes once to the gateway
(model `chat`, the spec's model group), which routes it. The gateway passes `x-bench-id` on
(`gateway.forward_headers`), so the mock attributes each attempt.

Usage: gateway_worker.py --harness DIR --gateway URL --spec SPEC --out OUT
"""

import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harness", required=True, help="directory of naive_worker.py")
    ap.add_argument("--gateway", required=True, help="the gateway's base URL, e.g. http://127.0.0.1:8080/v1")
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(args.spec) as f:
        spec = json.load(f)
    for provider in spec["providers"].values():
        provider["api_base"] = args.gateway
    rewritten = args.spec + ".gateway.json"
    with open(rewritten, "w") as f:
        json.dump(spec, f)
    first = next(iter(spec["providers"]))
    worker = os.path.join(args.harness, "naive_worker.py")
    os.execv(sys.executable, [sys.executable, worker, "--spec", rewritten, "--out", args.out,
                              "--policy", f"fixed:{first}"])


if __name__ == "__main__":
    main()
