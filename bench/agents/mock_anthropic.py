"""A rate-limited mock Anthropic upstream (and OpenAI chat / Responses) for the agent benchmark.

Standard library only, one asyncio event loop, raw HTTP/1.1 with keep-alive (the client and the
gateway both reuse connections). Everything binds 127.0.0.1.

Routes
  POST /v1/messages          Anthropic Messages, `stream: true` (SSE) or whole. Limits: RPM, ITPM,
                             OTPM, counted as Anthropic documents (mock_messages.py). Prompt
                             caching (mock_cache.py).
  POST /v1/chat/completions  OpenAI chat completions, streamed or whole. Limits: RPM, TPM.
  POST /v1/responses         OpenAI Responses, streamed or whole: the Responses workload's direct
                             baseline (the gateway serves /v1/responses over the chat route).
                             Same limiter as chat completions.
  GET  /stats                counters, peak window use, cache totals (JSON)
  GET  /requests?since=N     the per-attempt log (JSON list), from sequence number N
  POST /reset                zero everything; a JSON body may set new limits and timings
                             ({"itpm": 2000000, "otpm": 400000, "rpm": 4000, "tpm": ..., ...})
  GET  /healthz

The details, one module each: the token rule (mock_tokens.py, the same in workload.py), the
window and the bucket (mock_limits.py), Anthropic's rate limits and checks (mock_messages.py),
the prompt cache (mock_cache.py), the answers and their timing (mock_answers.py), the Anthropic
event sequence (mock_messages_sse.py), OpenAI's account (mock_openai.py, mock_chat.py,
mock_responses.py), the server, its routes and log (mock_server.py, mock_http.py).

Each attempt is logged (GET /requests) with its `x-bench-id` header, status, the token counts,
what it asked of each limit and what the window held, and its service time: `service_ms` from
the moment the request was read whole to the last byte written, `ttfb_ms` to the first event
written. Router-added latency = client latency - service_ms.

  python3 mock_anthropic.py --port 0 --port-file PORTFILE --itpm 2000000 --otpm 400000 --rpm 4000
"""

import argparse
import asyncio
import sys

from mock_server import serve


def span(s):
    lo, _, hi = s.partition(":")
    return (int(lo), int(hi or lo))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", help="write the bound port here once listening")
    p.add_argument("--rpm", type=int, default=0, help="Anthropic RPM (0: unlimited)")
    p.add_argument("--itpm", type=int, default=0, help="Anthropic ITPM (0: unlimited)")
    p.add_argument("--otpm", type=int, default=0, help="Anthropic OTPM (0: unlimited)")
    p.add_argument("--chat-rpm", type=int, default=0, help="OpenAI RPM (0: unlimited)")
    p.add_argument("--tpm", type=int, default=0, help="OpenAI TPM (0: unlimited)")
    p.add_argument("--chat-output-cap", type=int, default=16384,
                   help="completion tokens OpenAI's TPM counts for a request without max_tokens")
    p.add_argument("--limiter", choices=("window", "bucket"), default="window")
    p.add_argument("--exact-remaining", action="store_true",
                   help="do not round remaining tokens down to thousands in the headers")
    p.add_argument("--no-ratelimit-headers", action="store_true",
                   help="send no anthropic-ratelimit-* headers (retry-after stays on 429s)")
    p.add_argument("--tool-overhead-tokens", type=int, default=346)
    p.add_argument("--ttfb-ms", type=float, default=150)
    p.add_argument("--ttfb-jitter-ms", type=float, default=50)
    p.add_argument("--stream-ms", type=float, default=250)
    p.add_argument("--stream-jitter-ms", type=float, default=100)
    p.add_argument("--chunks", type=int, default=12, help="deltas per answer")
    p.add_argument("--tool-prob", type=float, default=0.8)
    p.add_argument("--think-tokens", type=span, default=(30, 300))
    p.add_argument("--text-tokens", type=span, default=(50, 800))
    p.add_argument("--tool-input-tokens", type=span, default=(20, 200))
    p.add_argument("--exit-after", type=float, default=1800,
                   help="stop by itself after this many seconds")
    return p.parse_args(argv)


def main():
    args = parse_args()
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
