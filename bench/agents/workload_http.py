"""The workload's HTTP over asyncio streams: one keep-alive connection, SSE events timed.

Timing, per request (time.perf_counter, the event loop's own thread): latency from the first
byte written to the last byte of the stream read; TTFB to the first SSE event (not the status
line: a proxy could send its headers early).
"""

import asyncio
import time
from urllib.parse import urlsplit


class HttpError(Exception):
    pass


class Body:
    """An answer's body as it arrives: SSE events go to on_event(name, data_str) as they
    complete (the first one's time kept), any other body is kept whole."""

    def __init__(self, sse, on_event):
        self.sse, self.on_event = sse, on_event
        self.buf = b""
        self.payload = bytearray()
        self.t_event = None

    def feed(self, chunk):
        if not self.sse:
            self.payload.extend(chunk)
            return
        self.buf += chunk
        while True:
            cut = self.buf.find(b"\n\n")
            if cut < 0:
                break
            frame, self.buf = self.buf[:cut], self.buf[cut + 2:]
            name, datas = None, []
            for line in frame.split(b"\n"):
                if line.startswith(b"event:"):
                    name = line[6:].strip().decode()
                elif line.startswith(b"data:"):
                    datas.append(line[5:].strip().decode())
            if datas:
                if self.t_event is None:
                    self.t_event = time.perf_counter()
                self.on_event(name, "\n".join(datas))


class Conn:
    """One keep-alive HTTP/1.1 connection; reopened when the server closes it."""

    def __init__(self, url):
        u = urlsplit(url)
        self.host, self.port = u.hostname, u.port or 80
        self.base = u.path.rstrip("/")
        self.reader = self.writer = None

    async def open(self):
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port,
                                                                     limit=1 << 22)

    def close(self):
        if self.writer is not None:
            try:
                self.writer.close()
            except Exception:
                pass
        self.reader = self.writer = None

    async def post(self, path, headers, body, on_event):
        """POST `body`; SSE events go to on_event(name, data_str). Returns a dict of timings."""
        for attempt in (0, 1):
            reused = self.writer is not None
            try:
                return await self._post(path, headers, body, on_event)
            except (ConnectionError, asyncio.IncompleteReadError) as e:
                self.close()
                if not reused or attempt:
                    raise HttpError(f"connection: {e!r}")

    def _request(self, path, headers, body):
        head = [f"POST {self.base}{path} HTTP/1.1", f"Host: {self.host}:{self.port}",
                "Content-Type: application/json", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(head) + "\r\n\r\n").encode() + body

    async def _post(self, path, headers, body, on_event):
        await self.open()
        data = self._request(path, headers, body)
        r = self.reader
        t_send = time.perf_counter()
        self.writer.write(data)
        await self.writer.drain()
        status_line = await r.readuntil(b"\r\n")
        t_status = time.perf_counter()
        raw = await r.readuntil(b"\r\n\r\n")
        status = int(status_line.split(b" ", 2)[1])
        hdrs = {}
        for line in raw.decode("latin-1").split("\r\n"):
            if line:
                k, _, v = line.partition(":")
                hdrs[k.strip().lower()] = v.strip()
        answer = Body(hdrs.get("content-type", "").startswith("text/event-stream"), on_event)
        await self._read_body(hdrs, answer.feed)
        t_end = time.perf_counter()
        if hdrs.get("connection", "").lower() == "close":
            self.close()
        return {"status": status, "headers": hdrs, "body": bytes(answer.payload),
                "t_send": t_send, "t_status": t_status, "t_event": answer.t_event,
                "t_end": t_end}

    async def _read_body(self, hdrs, feed):
        """Reads the body (chunked, by content-length, or to the close) into `feed`."""
        r = self.reader
        if hdrs.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await r.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await r.readuntil(b"\r\n")
                    break
                chunk = await r.readexactly(size + 2)
                feed(chunk[:-2])
        elif "content-length" in hdrs:
            feed(await r.readexactly(int(hdrs["content-length"])))
        else:
            feed(await r.read())
            self.close()
