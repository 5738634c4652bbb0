"""Exit 0 once the mock at argv[1] has seen a request for a scored provider (not the warm-up);
with `--reset`, once it has none (the harness's driver resets the mock as a run starts).

bench/run.sh --chaos polls it to time the Redis outage from the run's first request: first until
the run's driver has reset the mock (so the previous run's requests do not count), then until
the run's first request.
"""

import json
import sys
import urllib.request

stats = json.load(urllib.request.urlopen(sys.argv[1] + "/stats", timeout=1))
scored = sum(p["requests"] for name, p in stats["providers"].items() if name != "warmup")
if "--reset" in sys.argv[2:]:
    sys.exit(0 if scored == 0 else 1)
sys.exit(0 if scored > 0 else 1)
