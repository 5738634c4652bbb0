"""The mock's raw HTTP/1.1: reading a request, writing a head, a JSON answer or a chunk."""

import asyncio
import json

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           429: "Too Many Requests", 500: "Internal Server Error"}


async def read_request(reader):
    """(method, target, headers, body) of the next request, or None when there is none."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, _ = lines[0].split(" ", 2)
    except ValueError:
        return None
    headers = {}
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
    return method, target, headers, await read_body(reader, headers)


async def read_body(reader, headers):
    """The request's body: chunked or by content-length."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = bytearray()
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            body += await reader.readexactly(size)
            await reader.readline()
            if size == 0:
                break
        return bytes(body)
    return await reader.readexactly(int(headers.get("content-length") or 0))


def head(status, headers):
    """A response's status line and headers."""
    reason = REASONS.get(status, "X")
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def send_json(writer, status, obj, headers=()):
    """A whole JSON answer."""
    data = json.dumps(obj).encode()
    writer.write(head(status, [("content-type", "application/json"),
                               ("content-length", str(len(data))), *headers]) + data)
    await writer.drain()


def chunk(payload):
    """One chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)
