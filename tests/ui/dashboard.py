"""The gateway's dashboard (`/ui`) in a real headless Chromium.

    python3 tests/ui/dashboard.py PATH/TO/llmroute [SCREENSHOT]

Starts the mock upstreams of tests/agents/mock_upstreams.py and `llmroute serve` over them: two
deployments of different prices (`cheap/mock-chat` on the chat mock, `an/claude-sonnet-4-5` on
the Anthropic mock), a tenant `acme` whose tier has daily and monthly budgets, an admin key, and
usage records in an SQLite file. Sends chat requests with acme's key so that there is spend and
there are records, then runs dashboard.mjs (puppeteer-core driving /usr/bin/chromium, or
$CHROMIUM), which checks what the page shows and saves a screenshot to SCREENSHOT (default
target/ui/dashboard.png). SIGTERM then stops the gateway, which must exit 0 with no key in its
log.
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "agents"))
from gateway_process import serving  # noqa: E402
from mock_upstreams import MockServer  # noqa: E402

TENANT_KEY = "llmr-ui-tenant-test-key"
ADMIN_KEY = "llmr-ui-admin-test-key"
UPSTREAM_KEY = "sk-upstream-ui-S3CRET"
# (model asked, requests sent): both deployments serve some.
SENT = [("mock-chat", 4), ("claude-sonnet-4-5", 2)]

CONFIG = """
providers:
  - name: cheap
    api: openai
    base_url: {chat}/v1
    api_key_env: UI_UPSTREAM_KEY
    models:
      - {{ name: mock-chat, price: {{ input: 1, output: 4 }}, limits: {{ rpm: 60, tpm: 500000, concurrency: 8 }} }}
  - name: an
    api: anthropic
    base_url: {anthropic}
    api_key_env: UI_UPSTREAM_KEY
    models:
      - {{ name: claude-sonnet-4-5, price: {{ input: 3, output: 15 }}, limits: {{ rpm: 20, itpm: 400000, otpm: 80000 }} }}
tenants:
  tiers:
    team: {{ rpm: 120, tpm: 2000000, budget: {{ daily_usd: 5, monthly_usd: 60 }} }}
  members: {{ acme: team }}
usage: sqlite:{usage}
gateway:
  keys:
    - {{ sha256: {tenant_hash}, tenant: acme }}
  admin_keys: [{admin_hash}]
"""


def sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


def chat(base, model):
    """One chat completion with acme's key; its status."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hello"}]})
    req = urllib.request.Request(base + "/v1/chat/completions", data=body.encode(), headers={
        "Authorization": f"Bearer {TENANT_KEY}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as answer:
        answer.read()
        return answer.status


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    llmroute = os.path.abspath(sys.argv[1])
    screenshot = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else "target/ui/dashboard.png")
    os.makedirs(os.path.dirname(screenshot), exist_ok=True)
    work = tempfile.mkdtemp(prefix="llmroute-ui-")
    with MockServer("anthropic") as anthropic, MockServer("chat") as chat_mock:
        config = os.path.join(work, "providers.yaml")
        with open(config, "w") as f:
            f.write(CONFIG.format(chat=chat_mock.url, anthropic=anthropic.url,
                                  usage=os.path.join(work, "usage.sqlite"),
                                  tenant_hash=sha256(TENANT_KEY), admin_hash=sha256(ADMIN_KEY)))
        secrets = (UPSTREAM_KEY, TENANT_KEY, ADMIN_KEY)
        with serving(llmroute, config, secrets, UI_UPSTREAM_KEY=UPSTREAM_KEY) as gateway:
            for model, n in SENT:
                for _ in range(n):
                    status = chat(gateway.base, model)
                    assert status == 200, f"{model}: HTTP {status}"
            expect = {
                "deployments": ["cheap/mock-chat", "an/claude-sonnet-4-5"],
                "tenant": "acme",
                "requests": sum(n for _, n in SENT),
            }
            env = dict(os.environ, LLMROUTE_UI_ADMIN_KEY=ADMIN_KEY,
                       LLMROUTE_UI_TENANT_KEY=TENANT_KEY)
            run = subprocess.run(["node", os.path.join(HERE, "dashboard.mjs"), gateway.base,
                                  json.dumps(expect), screenshot],
                                 env=env, capture_output=True, text=True, timeout=180)
            print(run.stdout.strip())
            if run.returncode != 0:
                print(run.stderr.strip()[-4000:])
                print("dashboard: FAILED")
                return 1
    print(f"dashboard: ok, screenshot at {screenshot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
