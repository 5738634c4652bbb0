"""`POST /v1/embeddings` through the official `openai` Python client.

Starts a mock OpenAI-compatible upstream (stdlib http.server) and `llmroute serve` on free
ports, then checks what a client of the OpenAI SDK sees from `client.embeddings.create`:

- `encoding_format` unset: the SDK asks for base64 and decodes it itself (little-endian float32,
  as OpenAI sends it), so it gets the upstream's floats rounded to float32;
- `encoding_format="float"`: the floats as written, each the shortest decimal of its float32;
- `encoding_format="base64"`: the strings, which decode to those float32s exactly;
- token-id inputs, `dimensions` and `user` passed on, the router's `x-llmroute-*` headers, and
  `BadRequestError` naming a chat model asked for embeddings.

The upstream is always asked for floats. SIGTERM then stops the gateway with exit status 0.

Usage: python gateway_embeddings.py PATH/TO/llmroute
"""

import base64
import hashlib
import json
import os
import struct
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai

from gateway_process import serving

KEY = "llmr-python-embed-key"
# Each one the shortest decimal of its float32: written back as it is by the float format.
VECTORS = [[0.5, -1.25, 0.1], [1.5, 0.2, -3.0]]
SEEN = []


def float32(values):
    """`values` rounded to float32, as Python floats."""
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))


class Upstream(BaseHTTPRequestHandler):
    """Answers /v1/embeddings with one of `VECTORS` per input, in reverse order of index."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        SEEN.append(body)
        assert self.path == "/v1/embeddings", self.path
        assert body.get("encoding_format") == "float", body
        inputs = body["input"]
        data = [{"object": "embedding", "index": i, "embedding": VECTORS[i % 2]}
                for i in reversed(range(len(inputs)))]
        answer = {"object": "list", "data": data, "model": body["model"],
                  "usage": {"prompt_tokens": 9, "total_tokens": 9}}
        raw = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def main(llmroute):
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    work = tempfile.mkdtemp()
    config = os.path.join(work, "providers.yaml")
    with open(config, "w") as f:
        f.write(f"""
providers:
  - name: up
    api: openai
    base_url: http://127.0.0.1:{upstream.server_address[1]}/v1
    api_key_env: UP_KEY
    models:
      - {{ name: small, aliases: [chat], price: {{ input: 1, output: 2 }} }}
      - {{ name: te, kind: embedding, aliases: [embed], price: {{ input: 0.02 }} }}
tenants:
  tiers: {{ open: {{ rpm: 100 }} }}
  members: {{ py: open }}
gateway:
  keys:
    - {{ sha256: {hashlib.sha256(KEY.encode()).hexdigest()}, tenant: py }}
""")
    with serving(llmroute, config, secrets=("S3CRET", KEY), UP_KEY="sk-upstream-S3CRET") as gateway:
        base = gateway.base + "/v1"
        client = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0)

        # Unset: the SDK sends base64 and decodes the float32s itself.
        decoded = client.embeddings.create(model="embed", input=["one", "two"])
        assert [d.index for d in decoded.data] == [0, 1], decoded
        assert [d.embedding for d in decoded.data] == [float32(v) for v in VECTORS], decoded
        assert decoded.model == "te", decoded
        assert (decoded.usage.prompt_tokens, decoded.usage.total_tokens) == (9, 9), decoded.usage
        assert SEEN[-1]["input"] == ["one", "two"], SEEN[-1]

        floats = client.embeddings.create(model="embed", input="one", encoding_format="float")
        assert floats.data[0].embedding == VECTORS[0], floats

        raw = client.embeddings.create(model="te", input=["one", "two"], encoding_format="base64")
        for item, vector in zip(raw.data, VECTORS):
            assert isinstance(item.embedding, str), item
            got = list(struct.unpack(f"<{len(vector)}f", base64.b64decode(item.embedding)))
            assert got == float32(vector), (got, vector)
        assert raw.data[0].embedding == base64.b64encode(struct.pack("<3f", *VECTORS[0])).decode()

        tokens = client.embeddings.create(model="te", input=[[9906, 1917], [40]], dimensions=3,
                                          user="user-1", encoding_format="float")
        assert len(tokens.data) == 2, tokens
        assert SEEN[-1]["input"] == [[9906, 1917], [40]], SEEN[-1]
        assert (SEEN[-1]["dimensions"], SEEN[-1]["user"]) == (3, "user-1"), SEEN[-1]

        response = client.embeddings.with_raw_response.create(model="te", input="one")
        assert response.headers["x-llmroute-provider"] == "up", response.headers
        assert response.headers["x-llmroute-model"] == "te", response.headers
        assert float(response.headers["x-llmroute-cost-usd"]) > 0, response.headers

        try:
            client.embeddings.create(model="chat", input="one")
            raise AssertionError("a chat model was asked for embeddings")
        except openai.BadRequestError as e:
            assert "model `chat` is a chat model" in e.body["message"], e.body
    upstream.shutdown()
    print("gateway_embeddings: decoded by the SDK, float, base64, token ids, headers, "
          "BadRequestError for a chat model: ok")


if __name__ == "__main__":
    main(sys.argv[1])
