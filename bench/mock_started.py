"""Exit 0 once the mock at argv[1] has seen a request for a scored provider (not the warm-up).

bench/run.sh --chaos polls it to time the Redis outage from the run's first request.
"""

import json
import sys
import urllib.request

stats = json.load(urllib.request.urlopen(sys.argv[1] + "/stats", timeout=1))
scored = sum(p["requests"] for name, p in stats["providers"].items() if name != "warmup")
sys.exit(0 if scored > 0 else 1)
