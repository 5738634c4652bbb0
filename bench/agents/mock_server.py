"""The mock's server: its state, one asyncio loop of keep-alive HTTP/1.1, routes, stats, log."""

import asyncio
import json
import os
import time
from urllib.parse import parse_qs, urlsplit

from mock_cache import PromptCache
from mock_chat import chat
from mock_http import read_request, send_json
from mock_limits import Bucket, Family, Window
from mock_messages import messages
from mock_responses import responses

ROUTES = {"/v1/messages": messages, "/v1/chat/completions": chat, "/v1/responses": responses}


class Mock:
    """The mock's state: limits and timings, both accounts, the prompt cache, the log."""

    def __init__(self, args):
        self.args = args
        self.timing = {k: getattr(args, k) for k in
                       ("ttfb_ms", "ttfb_jitter_ms", "stream_ms", "stream_jitter_ms", "chunks")}
        self.plan_cfg = {"tool_prob": args.tool_prob, "think": args.think_tokens,
                         "text": args.text_tokens, "tool_input": args.tool_input_tokens}
        self.reset({"rpm": args.rpm, "itpm": args.itpm, "otpm": args.otpm,
                    "chat_rpm": args.chat_rpm, "tpm": args.tpm, "limiter": args.limiter})

    def reset(self, cfg):
        """Zero everything; `cfg` may set new limits and timings."""
        cfg = cfg or {}
        a = self.args
        for k in ("rpm", "itpm", "otpm", "chat_rpm", "tpm", "limiter", "chat_output_cap",
                  "tool_overhead_tokens", "no_ratelimit_headers", "exact_remaining"):
            if k in cfg:
                setattr(a, k, cfg[k])
        for k in self.timing:
            if k in cfg:
                self.timing[k] = cfg[k]
        cls = Bucket if a.limiter == "bucket" else Window
        self.anthropic = Family("anthropic", {"rpm": a.rpm, "itpm": a.itpm, "otpm": a.otpm}, cls)
        self.openai = Family("openai", {"rpm": a.chat_rpm, "tpm": a.tpm}, cls)
        self.cache = PromptCache()
        self.log = []
        self.seq = 0
        self.inflight = 0
        self.max_inflight = 0

    def record(self, entry):
        """Appends an attempt's entry to the log, numbered."""
        entry["seq"] = self.seq
        self.seq += 1
        self.log.append(entry)
        return entry

    def stats(self):
        """GET /stats: counters, peak window use, cache totals."""
        now = time.monotonic()
        self.cache.expire(now)
        return {"anthropic": self.anthropic.stats(), "openai": self.openai.stats(),
                "limiter": self.args.limiter, "cache": dict(self.cache.stats),
                "cache_entries": len(self.cache.entries), "max_inflight": self.max_inflight,
                "log_len": len(self.log), "cpu_s": sum(os.times()[:2])}

    async def serve_conn(self, reader, writer):
        """One connection: requests one after the other until it closes."""
        try:
            while True:
                request = await read_request(reader)
                if request is None:
                    return
                method, target, headers, body = request
                t0 = time.monotonic()
                await self.dispatch(method, target, headers, body, writer, t0)
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def dispatch(self, method, target, headers, body, writer, t0):
        """The control routes, else an API route's handler."""
        url = urlsplit(target)
        path = url.path
        if path == "/healthz":
            return await send_json(writer, 200, {"ok": True})
        if path == "/stats" and method == "GET":
            return await send_json(writer, 200, self.stats())
        if path == "/requests" and method == "GET":
            since = int(parse_qs(url.query).get("since", ["0"])[0])
            return await send_json(writer, 200, self.log[since:])
        if path == "/reset" and method == "POST":
            self.reset(json.loads(body) if body.strip() else {})
            return await send_json(writer, 200, {"ok": True, "limits": {
                "anthropic": self.anthropic.limits, "openai": self.openai.limits,
                "limiter": self.args.limiter}, "timing": self.timing})
        return await self.api(ROUTES.get(path), path, method, headers, body, writer, t0)

    async def api(self, handler, path, method, headers, body, writer, t0):
        """An API route: 404, 405 or 400 here, else its handler, counted in flight."""
        if handler is None:
            return await send_json(writer, 404, {"type": "error", "error": {
                "type": "not_found_error", "message": f"mock: no route {path}"}})
        if method != "POST":
            return await send_json(writer, 405, {"error": "POST only"})
        try:
            req = json.loads(body)
        except ValueError:
            return await send_json(writer, 400, {"type": "error", "error": {
                "type": "invalid_request_error", "message": "body is not JSON"}})
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            await handler(self, req, headers, writer, t0, len(body))
        finally:
            self.inflight -= 1


async def serve(args):
    """Listens on 127.0.0.1 (the port to --port-file) until --exit-after seconds."""
    mock = Mock(args)
    server = await asyncio.start_server(mock.serve_conn, "127.0.0.1", args.port,
                                        limit=1 << 20, backlog=512)
    port = server.sockets[0].getsockname()[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, args.port_file)
    print(f"mock listening on http://127.0.0.1:{port}", flush=True)
    async with server:
        try:
            await asyncio.wait_for(server.serve_forever(), args.exit_after)
        except asyncio.TimeoutError:
            pass
