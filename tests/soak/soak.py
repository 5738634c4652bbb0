"""A soak test of `llmroute serve`: steady load for some minutes on a shared Redis ledger,
runtime keys made and revoked as it runs, Redis killed and started again empty half-way, and at
the end the checks of issue 52's "memory and soak":

  1. resident memory: after a warm-up, the gateway's RSS grows by less than 5 %;
  2. open files: the same at a quiet moment after the warm-up and at the end (idle upstream
     connections of the HTTP client's pool apart);
  3. nothing in flight once the load stops: `/metrics` and the ledger (read by `llmroute quota`
     straight from Redis) both say 0;
  4. every request the gateway admitted (answered 200, streams the client cut included) has its
     usage record in the SQLite sink after the gateway stopped;
  5. the gateway exits 0 on SIGTERM.

It starts its own redis-server (no persistence) on a free port, a mock OpenAI-compatible
upstream (whole answers with usage; streams of a few chunks, the usage and [DONE], a few ms
between events) and `llmroute serve --workers 2`, and stops all of them on the way out, however
it ends (Ctrl-C and SIGTERM included). Only the standard library is used.

Usage: python3 tests/soak/soak.py PATH/TO/llmroute --minutes 2 [--rate 20] [--threads 4]
       [--seed N] [--keep]
"""

import argparse
import collections
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ADMIN_KEY = "llmr-soak-admin-" + uuid.uuid4().hex
UPSTREAM_KEY = "sk-soak-upstream-S3CRET"
DEPLOYMENT = "mock/soak-model"
TENANT = "soak"
USAGE = {"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28}
EVENT_GAP = 0.004  # seconds between a mock stream's events, and before any answer
STREAM_WORDS = ["The", " soak", " goes", " on", " and", " on", "."]
KEY_EVERY = 10.0  # a new runtime key this often
KEYS_KEPT = 2  # keys in use at once; older ones are revoked
REVOKED_SHARE = 0.03  # requests sent on purpose with a revoked key
MIX = (("whole", 0.6), ("stream", 0.3), ("cut", 0.1))
RSS_GROWTH_MAX = 0.05
SAMPLE_EVERY = 1.0
PREFIX = "llmroute gateway listening on "


def log(message):
    print(f"soak: {message}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Failed(Exception):
    """A check that did not hold."""


# ---------------------------------------------------------------------------------------------
# The mock upstream


class Upstream(BaseHTTPRequestHandler):
    """OpenAI's chat completions on HTTP/1.1 keep-alive (so the gateway's client pools its
    connections, as with a real provider): a whole answer with usage, or a stream of
    chat.completion.chunk events, the usage and [DONE], EVENT_GAP apart."""

    protocol_version = "HTTP/1.1"
    counts = collections.Counter()
    counts_lock = threading.Lock()

    def log_message(self, *args):
        pass

    def count(self, what):
        with Upstream.counts_lock:
            Upstream.counts[what] += 1

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        assert self.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}"
        base = {"id": "chatcmpl-soak", "model": body["model"], "created": int(time.time())}
        time.sleep(EVENT_GAP)
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(STREAM_WORDS)}
            answer = dict(base, object="chat.completion", usage=USAGE,
                          choices=[{"index": 0, "message": message, "finish_reason": "stop"}])
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.count("whole")
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        chunk = dict(base, object="chat.completion.chunk")
        events = [dict(chunk, choices=[{"index": 0, "delta": {"role": "assistant", "content": w},
                                        "finish_reason": None}]) for w in STREAM_WORDS]
        events.append(dict(chunk, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]))
        events.append(dict(chunk, choices=[], usage=USAGE))
        try:
            for i, event in enumerate(events):
                if i:
                    time.sleep(EVENT_GAP)
                self.chunk(f"data: {json.dumps(event)}\n\n".encode())
            time.sleep(EVENT_GAP)
            self.chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.count("stream")
        except (BrokenPipeError, ConnectionResetError):
            # The gateway dropped the call: its client went away.
            self.close_connection = True
            self.count("stream dropped by the gateway")

    def chunk(self, data):
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


class UpstreamServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A connection the gateway closed while the handler read its next request.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


# ---------------------------------------------------------------------------------------------
# Redis and the gateway


class Redis:
    """A throwaway redis-server on `port`, without persistence."""

    def __init__(self, port, work):
        self.port = port
        self.work = work
        self.process = None
        self.starts = 0

    def start(self):
        self.starts += 1
        logfile = os.path.join(self.work, f"redis-{self.starts}.log")
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.work, "--logfile", logfile],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise Failed(f"redis-server exited {self.process.returncode} at start; see {logfile}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise Failed(f"redis-server did not answer on port {self.port} within 10 s")

    def get(self, key):
        """GET `key` over RESP: its value as text, or None."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(f"*2\r\n$3\r\nGET\r\n${len(key)}\r\n{key}\r\n".encode())
            reply = b""
            while not reply.endswith(b"\r\n") or (reply.startswith(b"$") and reply.count(b"\r\n") < 2
                                                   and not reply.startswith(b"$-1")):
                more = s.recv(4096)
                if not more:
                    break
                reply += more
        if reply.startswith(b"$-1"):
            return None
        if not reply.startswith(b"$"):
            raise Failed(f"Redis answered GET {key} with {reply[:100]!r}")
        return reply.split(b"\r\n")[1].decode()

    def kill(self):
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None


def write_config(work, redis_port, upstream_port):
    config = os.path.join(work, "soak.yaml")
    with open(config, "w") as f:
        f.write(f"""
state: redis://127.0.0.1:{redis_port}
namespace: soak
usage:
  sink: sqlite:{os.path.join(work, "usage.sqlite")}
  spill: {os.path.join(work, "usage.spill")}
defaults: {{ model: chat }}
providers:
  - name: mock
    api: openai
    base_url: http://127.0.0.1:{upstream_port}/v1
    api_key_env: SOAK_UPSTREAM_KEY
    models:
      - name: soak-model
        aliases: [chat]
        price: {{ input: 1, output: 2 }}
        limits: {{ rpm: 1000000, tpm: 1000000000, concurrency: 100000 }}
tenants:
  tiers:
    soak:
      rpm: 100000
      tpm: 100000000
      concurrency: 10000
      budget: {{ daily_usd: 100000, monthly_usd: 1000000 }}
  members: {{ {TENANT}: soak }}
""")
    return config


class Gateway:
    """`llmroute serve` on a free loopback port, its stdout and stderr in files."""

    def __init__(self, llmroute, config, work):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("LLMROUTE_", "OTEL_")) and k not in ("REDIS_URL", "RUST_LOG")}
        env.update(LLMROUTE_STATE_DIR=os.path.join(work, "state"), LLMROUTE_ADMIN_KEY=ADMIN_KEY,
                   SOAK_UPSTREAM_KEY=UPSTREAM_KEY)
        self.out_path = os.path.join(work, "gateway.out")
        self.err_path = os.path.join(work, "gateway.err")
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.process = subprocess.Popen(
                [llmroute, "--config", config, "serve", "--listen", "127.0.0.1:0", "--workers", "2"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, start_new_session=True)
        self.pid = self.process.pid
        deadline = time.monotonic() + 60
        while True:
            with open(self.out_path) as f:
                first = f.readline()
            if first.endswith("\n"):
                break
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise Failed(f"the gateway did not start (exit {self.process.poll()}):\n{self.stderr_tail()}")
            time.sleep(0.05)
        first = first.strip()
        if not first.startswith(PREFIX):
            raise Failed(f"unexpected first line from the gateway: {first!r}")
        self.base = first[len(PREFIX):]
        self.host, port = self.base.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)

    def stderr_tail(self, chars=4000):
        try:
            with open(self.err_path, errors="replace") as f:
                return f.read()[-chars:]
        except OSError:
            return ""

    def stop(self, timeout=60):
        """SIGTERM, then the exit status (None if it had to be killed)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                return None
        return self.process.returncode

    def call(self, method, path, body=None, key=ADMIN_KEY, timeout=10):
        """One request on a connection of its own: (status, body as text)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            headers = {"authorization": f"Bearer {key}"} if key else {}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["content-type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            return response.status, response.read().decode(errors="replace")
        finally:
            conn.close()

    def metrics(self):
        status, text = self.call("GET", "/metrics", key=None)
        if status != 200:
            raise Failed(f"/metrics answered {status}")
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    values[name] = float(value)
                except ValueError:
                    pass
        return values


def metric(values, name, **labels):
    """The sum of the series of `name` whose labels include `labels`."""
    total = 0.0
    for series, value in values.items():
        base, _, rest = series.partition("{")
        if base != name:
            continue
        if all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += value
    return total


def memory_kib(pid):
    """VmRSS and its parts (RssAnon, RssFile, RssShmem) of the process, in KiB."""
    found = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                found[name] = int(value.split()[0])
    if "VmRSS" not in found:
        raise Failed(f"no VmRSS for pid {pid}")
    return found


def rss_kib(pid):
    return memory_kib(pid)["VmRSS"]


def sockets_by_inode(pid):
    """Each TCP socket of the process's network namespace: inode to (state, local port,
    remote port)."""
    found = {}
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f)
                for line in f:
                    fields = line.split()
                    local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
                    found[inode] = (state, int(local.rsplit(":", 1)[1], 16),
                                    int(remote.rsplit(":", 1)[1], 16))
        except FileNotFoundError:
            pass
    return found


def open_files(pid, ports):
    """The process's open file descriptors by kind: sockets by what they connect to (`ports`
    maps a remote port to a name; the gateway's own port is `client`), files by path, the rest
    by their link's kind (pipe, anon_inode:[eventpoll], ...)."""
    kinds = collections.Counter()
    sockets = sockets_by_inode(pid)
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            inode = target[len("socket:["):-1]
            if inode not in sockets:
                kinds["socket (not TCP)"] += 1
                continue
            state, local, remote = sockets[inode]
            if state == "0A":
                kinds["tcp listening"] += 1
            elif remote in ports:
                kinds[f"tcp to {ports[remote]}"] += 1
            elif local == ports.get("gateway"):
                kinds["tcp from a client"] += 1
            else:
                kinds[f"tcp other (state {state})"] += 1
        elif target.startswith("pipe:"):
            kinds["pipe"] += 1
        elif target.startswith("anon_inode:"):
            kinds[target] += 1
        else:
            kinds[f"file {os.path.basename(target)}"] += 1
    return kinds


# ---------------------------------------------------------------------------------------------
# Keys


class Key:
    def __init__(self, number, id_, secret, made_at, version):
        self.number = number
        self.id = id_
        self.secret = secret
        self.made_at = made_at
        self.version = version  # the key store's version its making raised it to
        self.served = 0  # answers 200
        self.revoking_at = None  # the revocation was sent then (not picked from then on)
        self.revoked_at = None  # ... and answered 200 then
        self.lost_at = None  # Redis came back empty then: the key store no longer holds it
        self.unknown = 0  # answers "unknown API key" while neither revoked nor lost


class Keys:
    """The runtime keys the load uses: one made every KEY_EVERY through the admin API, the
    older ones revoked, and those Redis lost when it came back empty."""

    def __init__(self, gateway, clock):
        self.gateway = gateway
        self.clock = clock
        self.lock = threading.Lock()
        self.all = []
        self.counts = collections.Counter()
        self.errors = []
        self.made = 0
        # Held by whoever changes keys: the thread making them, or the main one around Redis's
        # restart.
        self.admin = threading.Lock()
        # The key store's version, as the changes made count it (each create and revoke raises
        # it by one; lua/keys/put.lua), and what it was when Redis went away.
        self.version = 0
        self.version_lost = None

    def make(self):
        """One new key; False if the admin API did not make it (say, Redis away)."""
        self.made += 1
        try:
            status, text = self.gateway.call(
                "POST", "/admin/v1/keys", {"tenant": TENANT, "name": f"soak-{self.made}"})
        except OSError as e:
            status, text = None, str(e)
        if status != 201:
            self.counts[f"create answered {status}"] += 1
            self.errors.append((round(self.clock(), 1), "create", status, text[:200]))
            return False
        answer = json.loads(text)
        with self.lock:
            self.version += 1
            self.all.append(Key(self.made, answer["id"], answer["key"], self.clock(), self.version))
        self.counts["created"] += 1
        return True

    def revoke_old(self):
        with self.lock:
            live = [k for k in self.all if k.revoked_at is None and k.lost_at is None]
            old = live[:-KEYS_KEPT] if len(live) > KEYS_KEPT else []
            for key in old:
                if key.revoking_at is None:
                    key.revoking_at = self.clock()
        for key in old:
            try:
                status, text = self.gateway.call("POST", f"/admin/v1/keys/{key.id}/revoke")
            except OSError as e:
                status, text = None, str(e)
            if status == 200:
                with self.lock:
                    key.revoked_at = self.clock()
                    self.version += 1
                self.counts["revoked"] += 1
            else:
                self.counts[f"revoke answered {status}"] += 1
                self.errors.append((round(self.clock(), 1), f"revoke {key.id}", status, text[:200]))

    def lost(self, at):
        """Redis came back empty: every key made so far is gone from the store."""
        with self.lock:
            for key in self.all:
                if key.lost_at is None and key.revoked_at is None:
                    key.lost_at = at
            self.version_lost, self.version = self.version, 0
        self.counts["lost with Redis"] += sum(1 for k in self.all if k.lost_at == at)

    def pick(self, rng):
        """(key, on purpose revoked?) for one request."""
        with self.lock:
            revoked = [k for k in self.all if k.revoked_at is not None]
            if revoked and rng.random() < REVOKED_SHARE:
                return rng.choice(revoked), True
            usable = [k for k in self.all
                      if k.revoking_at is None and k.lost_at is None and not k.unknown]
            if usable:
                return rng.choice(usable), False
            # Right after Redis came back empty, until a new key is made, or when the gateway
            # refuses the keys made since (a failure, reported at the end): the newest key made
            # before, so that the load goes on through the rest of the run whatever the gateway
            # does with keys.
            lost = [k for k in self.all if k.lost_at is not None and k.revoking_at is None]
            return (lost or self.all)[-1], False

    def refused(self, key, at):
        """`key` was answered "unknown API key" at `at`: expected of a revoked or lost key."""
        with self.lock:
            if not ((key.revoking_at is not None and key.revoking_at <= at)
                    or (key.lost_at is not None and key.lost_at <= at)):
                key.unknown += 1

    def run(self, stop):
        """Makes a key every KEY_EVERY (retrying each second while the admin API fails) and
        revokes the old ones, until `stop`."""
        next_at = self.clock() + KEY_EVERY
        while not stop.wait(0.2):
            if self.clock() < next_at:
                continue
            with self.admin:
                if self.make():
                    self.revoke_old()
                    next_at = self.clock() + KEY_EVERY
                else:
                    next_at = self.clock() + 1.0


# ---------------------------------------------------------------------------------------------
# The load


class Load:
    """Requests at `rate` a second from `threads` threads, each with its own x-request-id, on
    a connection of its own: whole answers, streams read to [DONE], streams cut after their
    first chunk."""

    def __init__(self, gateway, keys, rate, threads, seed, clock):
        self.gateway = gateway
        self.keys = keys
        self.gap = 1.0 / rate
        self.threads = threads
        self.seed = seed
        self.clock = clock
        self.lock = threading.Condition()
        self.next_at = clock()
        self.paused = True
        self.in_flight = 0
        self.stop = threading.Event()
        self.results = []
        self.workers = []

    def start(self):
        for n in range(self.threads):
            t = threading.Thread(target=self.worker, args=(random.Random(self.seed * 1000 + n),),
                                 name=f"load-{n}", daemon=True)
            t.start()
            self.workers.append(t)
        self.resume()

    def resume(self):
        with self.lock:
            self.paused = False
            self.next_at = self.clock()
            self.lock.notify_all()

    def pause(self, timeout=60):
        """Stops sending and waits until no request of the load is in flight."""
        with self.lock:
            self.paused = True
            if not self.lock.wait_for(lambda: self.in_flight == 0, timeout=timeout):
                raise Failed(f"{self.in_flight} requests still open {timeout} s after the load paused")

    def finish(self):
        self.pause()
        self.stop.set()
        with self.lock:
            self.lock.notify_all()
        for t in self.workers:
            t.join(timeout=10)

    def slot(self):
        """Waits for this thread's next turn; False once stopped."""
        with self.lock:
            while True:
                if self.stop.is_set():
                    return False
                if self.paused:
                    self.lock.wait(0.5)
                    continue
                # A load that fell behind (the gateway slow for a while) makes up for at most a
                # second of it.
                at = max(self.next_at, self.clock() - 1.0)
                self.next_at = at + self.gap
                while not (self.paused or self.stop.is_set()):
                    wait = at - self.clock()
                    if wait <= 0:
                        self.in_flight += 1
                        return True
                    self.lock.wait(wait)

    def worker(self, rng):
        while self.slot():
            try:
                kind = rng.choices([k for k, _ in MIX], [w for _, w in MIX])[0]
                key, on_purpose = self.keys.pick(rng)
                rid = f"soak-{kind}-{uuid.uuid4().hex}"
                started = self.clock()
                try:
                    status, detail = self.one(kind, key.secret, rid)
                except (OSError, http.client.HTTPException, ValueError) as e:
                    status, detail = None, f"{type(e).__name__}: {e}"
                if status == 401:
                    self.keys.refused(key, self.clock())
                elif status == 200:
                    key.served += 1
                self.results.append({"rid": rid, "kind": kind, "key": key, "revoked_on_purpose": on_purpose,
                                     "status": status, "detail": detail, "started": started,
                                     "ended": self.clock()})
            finally:
                with self.lock:
                    self.in_flight -= 1
                    self.lock.notify_all()

    def one(self, kind, secret, rid):
        """One request: (status, None if its answer was right, else what was wrong)."""
        conn = http.client.HTTPConnection(self.gateway.host, self.gateway.port, timeout=60)
        try:
            body = {"model": "chat", "messages": [{"role": "user", "content": f"Soak {rid}"}],
                    "max_tokens": 64}
            if kind != "whole":
                body.update(stream=True, stream_options={"include_usage": True})
            conn.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                         headers={"authorization": f"Bearer {secret}",
                                  "content-type": "application/json", "x-request-id": rid})
            sock = conn.sock
            response = conn.getresponse()
            if response.status != 200:
                return response.status, response.read()[:300].decode(errors="replace")
            if response.getheader("x-request-id") != rid:
                return 200, f"x-request-id came back as {response.getheader('x-request-id')!r}"
            if kind == "whole":
                answer = json.loads(response.read())
                content = answer["choices"][0]["message"]["content"]
                if content != "".join(STREAM_WORDS) or answer["usage"]["completion_tokens"] != 7:
                    return 200, f"unexpected answer {answer}"
                return 200, None
            if kind == "stream":
                text = response.read().decode()
                content = "".join(
                    choice["delta"].get("content") or ""
                    for line in text.split("\n\n") if line.startswith("data: {")
                    for choice in json.loads(line[len("data: "):])["choices"])
                if not text.endswith("data: [DONE]\n\n") or content != "".join(STREAM_WORDS):
                    return 200, f"unexpected stream {text[-300:]!r}"
                return 200, None
            # cut: read up to the first chunk's event, then go away without a word.
            while True:
                line = response.fp.readline()
                if not line:
                    return 200, "the stream ended before its first chunk"
                if line.startswith(b"data: {"):
                    break
            sock.shutdown(socket.SHUT_RDWR)
            return 200, None
        finally:
            conn.close()


# ---------------------------------------------------------------------------------------------
# The run


class Sampler:
    """The gateway's VmRSS and number of open files every SAMPLE_EVERY seconds."""

    def __init__(self, pid, clock):
        self.pid = pid
        self.clock = clock
        self.samples = []  # (t, VmRSS KiB, RssAnon KiB, fds)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="sampler", daemon=True)
        self.thread.start()

    def run(self):
        while True:
            try:
                fds = len(os.listdir(f"/proc/{self.pid}/fd"))
                memory = memory_kib(self.pid)
                self.samples.append((self.clock(), memory["VmRSS"], memory.get("RssAnon", 0), fds))
            except (OSError, Failed):
                return
            if self.stop.wait(SAMPLE_EVERY):
                return

    def between(self, start, end, anon=False):
        return [a if anon else rss for t, rss, a, _ in self.samples if start <= t <= end]


def quiet(load, gateway, ports, what):
    """Pauses the load and waits until the gateway is idle: nothing in flight in its ledger and
    its open files steady for 2 s. Its open files then, by kind."""
    load.pause()
    deadline = time.monotonic() + 30
    while metric(gateway.metrics(), "llmroute_deployment_in_flight", deployment=DEPLOYMENT) != 0:
        if time.monotonic() > deadline:
            raise Failed(f"{what}: still in flight 30 s after the load paused")
        time.sleep(0.2)
    last, steady_since = None, time.monotonic()
    while True:
        now = open_files(gateway.pid, ports)
        if now != last:
            last, steady_since = now, time.monotonic()
        elif time.monotonic() - steady_since >= 2.0:
            return now
        if time.monotonic() > deadline:
            return now
        time.sleep(0.25)


def ledger_in_flight(llmroute, config):
    """The deployment's and the tenant's requests in flight as `llmroute quota --json` reads them
    from Redis, in a process of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMROUTE_") and k != "REDIS_URL"}
    env["SOAK_UPSTREAM_KEY"] = UPSTREAM_KEY
    run = subprocess.run([llmroute, "--config", config, "quota", "--tenant", TENANT, "--json"],
                         capture_output=True, text=True, env=env, timeout=60)
    if run.returncode != 0:
        raise Failed(f"llmroute quota exited {run.returncode}: {run.stderr[-2000:]}")
    return json.loads(run.stdout)


def quota_in_flight(quota):
    """The deployment's and the tenant's requests in flight in `llmroute quota --json`."""
    found = {f"tenant {TENANT}": quota["tenant"]["concurrency"]["in_flight"]}
    for d in quota["deployments"]:
        found[f"{d['provider']}/{d['model']}"] = d["concurrency"]["in_flight"]
    return found


def summarize_samples(rss):
    return f"{statistics.median(rss) / 1024:.1f} MiB (median of {len(rss)})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("llmroute")
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--rate", type=float, default=20.0, help="requests a second (default 20)")
    parser.add_argument("--threads", type=int, default=4, help="client threads (default 4)")
    parser.add_argument("--outage-secs", type=float, default=3.0,
                        help="how long Redis stays away half-way (default 3)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, usage.sqlite)")
    args = parser.parse_args()
    if shutil.which("redis-server") is None:
        raise SystemExit("soak: redis-server is not on PATH")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    duration = args.minutes * 60
    # The warm-up: the first quarter of the run, at least 30 s. RSS is compared over windows of
    # a tenth of the run (at least 10 s) after it and at the end: medians of 1 s samples, so one
    # sample caught mid-burst (a batch of usage records, a stream's buffers) does not decide.
    warm_up = max(30.0, duration / 4)
    window = max(10.0, duration / 10)
    if duration < warm_up + 2 * window + 10:
        raise SystemExit(f"soak: --minutes {args.minutes} is too short for a {warm_up:.0f} s warm-up "
                         f"and two {window:.0f} s windows")

    # SIGTERM and SIGHUP end the run as Ctrl-C does: through the finally below.
    def interrupted(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)

    work = tempfile.mkdtemp(prefix="llmroute-soak-")
    upstream = redis = gateway = load = sampler = None
    stop_keys = threading.Event()
    failures = []
    report = []
    try:
        upstream = UpstreamServer(("127.0.0.1", 0), Upstream)
        threading.Thread(target=upstream.serve_forever, name="upstream", daemon=True).start()
        redis = Redis(free_port(), work)
        redis.start()
        config = write_config(work, redis.port, upstream.server_address[1])
        gateway = Gateway(args.llmroute, config, work)
        t0 = time.monotonic()

        def clock():
            return time.monotonic() - t0

        ports = {upstream.server_address[1]: "the upstream", redis.port: "Redis", "gateway": gateway.port}
        log(f"{args.minutes:g} min at {args.rate:g} requests/s, {args.threads} threads, seed {seed}; "
            f"gateway pid {gateway.pid} on {gateway.base}, Redis on {redis.port}, work in {work}")
        sampler = Sampler(gateway.pid, clock)
        keys = Keys(gateway, clock)
        if not keys.make():
            raise Failed(f"the first key was not made: {keys.errors}")
        keys_thread = threading.Thread(target=keys.run, args=(stop_keys,), name="keys", daemon=True)
        keys_thread.start()
        load = Load(gateway, keys, args.rate, args.threads, seed, clock)
        load.start()

        # 1. The warm-up, then a quiet moment: the open files then.
        time.sleep(max(0.0, warm_up - clock()))
        files_warm = quiet(load, gateway, ports, "after the warm-up")
        load.resume()
        window_first = (clock(), clock() + window)
        log(f"warm-up over at {window_first[0]:.0f} s: RSS {rss_kib(gateway.pid) / 1024:.1f} MiB, "
            f"{sum(files_warm.values())} open files")

        # 2. Half-way: Redis killed, and a fresh one (empty) on the same port a few seconds later.
        # Its window must not fall in the first RSS window.
        time.sleep(max(0.0, max(duration / 2, window_first[1] + 1) - clock()))
        before = gateway.metrics()
        with keys.admin:
            outage = clock()
            redis.kill()
            time.sleep(args.outage_secs)
            redis.start()
            back = clock()
            keys.lost(back)
            # The store lost every key: make one at once (the admin API may answer 503 for a while,
            # its connection to Redis not yet back).
            while not keys.make():
                if clock() - back > 60:
                    raise Failed(f"no key could be made within 60 s of Redis coming back: {keys.errors[-3:]}")
                time.sleep(0.5)
        log(f"Redis killed at {outage:.0f} s, back (empty) at {back:.0f} s; a new key at {clock():.0f} s")

        # 3. The end of the load, then a quiet moment again.
        time.sleep(max(0.0, duration - clock()))
        stop_keys.set()
        keys_thread.join(timeout=30)
        ended = clock()
        files_end = quiet(load, gateway, ports, "at the end")
        load.finish()
        sampler.stop.set()
        sampler.thread.join(timeout=5)
        after = gateway.metrics()

        # --- nothing in flight: /metrics, and the ledger read by another process.
        flying_metric = metric(after, "llmroute_deployment_in_flight", deployment=DEPLOYMENT)
        quota = ledger_in_flight(args.llmroute, config)
        flying_ledger = quota_in_flight(quota)
        report.append(f"in flight at the end: /metrics {flying_metric:g}; the ledger (llmroute quota) "
                      + ", ".join(f"{k} {v:g}" for k, v in sorted(flying_ledger.items())))
        if flying_metric != 0:
            failures.append(f"llmroute_deployment_in_flight is {flying_metric:g} after the load stopped")
        stuck = {k: v for k, v in flying_ledger.items() if v != 0}
        if stuck:
            failures.append(f"the ledger still holds requests in flight: {stuck}")

        # --- the ledger's mode through the outage.
        changes = (metric(after, "llmroute_ledger_mode_changes_total")
                   - metric(before, "llmroute_ledger_mode_changes_total"))
        local = (metric(after, "llmroute_ledger_local_admissions_total")
                 - metric(before, "llmroute_ledger_local_admissions_total"))
        mode = [m for m in ("shared", "local", "open") if metric(after, "llmroute_ledger_mode", mode=m) == 1]
        report.append(f"ledger: {changes:g} mode changes and {local:g} local admissions across the "
                      f"outage; mode at the end {mode}")
        streams = {re.search(r'ended="([^"]*)"', k).group(1): v for k, v in after.items()
                   if k.startswith("llmroute_streams_total{") and v}
        report.append("streams by how they ended (/metrics): "
                      + ", ".join(f"{v:g} {k}" for k, v in sorted(streams.items())))
        if mode != ["shared"]:
            failures.append(f"the ledger's mode at the end is {mode}, not shared")

        # --- requests, by kind and by how they ended.
        results = load.results
        admitted, outcomes, bad = {}, collections.Counter(), []
        for r in results:
            key = r["key"]
            status = r["status"]
            if status == 200:
                # Admitted, so recorded, even if what came back was wrong (then counted below).
                admitted[r["rid"]] = r["kind"]
            if status == 200 and r["detail"] is None:
                outcomes[f"{r['kind']} 200"] += 1
            elif status == 401 and key.revoking_at is not None and key.revoking_at <= r["ended"]:
                outcomes["401 revoked key" + (" (on purpose)" if r["revoked_on_purpose"] else " (raced)")] += 1
            elif status == 401 and key.lost_at is not None and key.lost_at <= r["ended"]:
                outcomes["401 key lost with Redis"] += 1
            else:
                outcomes[f"unexpected {status}"] += 1
                bad.append(r)
        lost_ok = sum(1 for r in results if r["status"] == 200 and r["key"].lost_at is not None
                      and r["started"] >= r["key"].lost_at)
        report.append(f"requests: {len(results)} in {ended:.0f} s ({len(results) / ended:.1f}/s): "
                      + ", ".join(f"{n} {what}" for what, n in sorted(outcomes.items())))
        if lost_ok:
            report.append(f"  {lost_ok} requests with a key made before Redis came back empty (gone from "
                          f"the store) were still answered 200")
        report.append("keys: " + ", ".join(f"{n} {what}" for what, n in sorted(keys.counts.items()))
                      + f"; the key store's version {keys.version_lost} when Redis went away, "
                      f"{redis.get('llmroute:{soak}:keys:version')} at the end (counted: {keys.version})")
        for when, what, status, text in keys.errors[:5]:
            report.append(f"  admin at {when} s: {what} answered {status}: {text}")
        report.append("upstream: " + ", ".join(f"{n} {what}" for what, n in sorted(Upstream.counts.items())))
        if bad:
            lines = [f"  at {r['started']:.1f}-{r['ended']:.1f} s {r['kind']} {r['rid']} key "
                     f"{r['key'].id} (#{r['key'].number}, made at {r['key'].made_at:.1f} s"
                     + (f", lost at {r['key'].lost_at:.1f} s" if r["key"].lost_at is not None else "")
                     + f"): {r['status']} {r['detail']}" for r in bad[:12]]
            failures.append(f"{len(bad)} requests answered other than expected:\n" + "\n".join(lines))
            made_after = [k for k in keys.all if k.made_at >= back]
            refused = [k for k in made_after if k.unknown]
            served = [k for k in made_after if k.served]
            if refused:
                what = (f"{len(refused)} of the {len(made_after)} keys made through the admin API after "
                        f"Redis came back empty were answered 401 \"unknown API key\" by the gateway that "
                        f"made them: those that raised the new key store's version to "
                        f"{', '.join(f'v{k.version}' for k in refused[:8])}{' ...' if len(refused) > 8 else ''}"
                        f" (the old store was at v{keys.version_lost} when Redis went away)")
                if served:
                    what += (f"; served: {', '.join(f'#{k.number} {k.id} at v{k.version}' for k in served[:3])}"
                             f", the first at {served[0].made_at:.0f} s")
                if max(k.version for k in refused) <= keys.version_lost < min(
                        [k.version for k in served] or [keys.version_lost + 1]):
                    what += (f". The gateway serves no key of the new store until its version passes the "
                             f"old one's (router-gateway/src/keys.rs: a listing with a lower version never "
                             f"replaces the view)")
                failures.append(what)
        if not any(k.startswith("401 revoked") for k in outcomes):
            failures.append("no request with a revoked key was sent: the keys were not revoked")

        # --- resident memory.
        samples = sampler.samples
        first = sampler.between(*window_first)
        last = sampler.between(ended - window, ended)
        if len(first) < 3 or len(last) < 3:
            failures.append(f"too few RSS samples ({len(first)} and {len(last)})")
        else:
            growth = statistics.median(last) / statistics.median(first) - 1
            peak = max(rss for _, rss, _, _ in samples)
            anon_first = statistics.median(sampler.between(*window_first, anon=True))
            anon_last = statistics.median(sampler.between(ended - window, ended, anon=True))
            report.append(f"RSS: {samples[0][1] / 1024:.1f} MiB at start; after the warm-up "
                          f"{summarize_samples(first)}, at the end {summarize_samples(last)}: "
                          f"{growth * 100:+.2f} % (limit {RSS_GROWTH_MAX * 100:.0f} %); peak {peak / 1024:.1f} MiB; "
                          f"of which anonymous {anon_first / 1024:.1f} then {anon_last / 1024:.1f} MiB")
            # Where it grew: the median of each tenth of the time from the warm-up to the end.
            start, step = window_first[0], (ended - window_first[0]) / 10
            tenths = [sampler.between(start + i * step, start + (i + 1) * step) for i in range(10)]
            trend = " ".join(f"{statistics.median(t) / 1024:.1f}" if t else "-" for t in tenths)
            report.append(f"  RSS after the warm-up, MiB, by tenth of the time left: {trend}")
            if growth >= RSS_GROWTH_MAX:
                failures.append(f"RSS grew {growth * 100:.2f} % from after the warm-up to the end "
                                f"(MiB by tenth of the time after the warm-up: {trend})")

        # --- open files at the two quiet moments.
        report.append(f"open files, quiet: after the warm-up {sum(files_warm.values())}, at the end "
                      f"{sum(files_end.values())} ({', '.join(f'{n} {k}' for k, n in sorted(files_end.items()))})")
        # The gateway's HTTP client (reqwest) keeps idle connections to the upstream for 90 s, as
        # many as requests went to it at once lately: their number at a quiet moment says how busy
        # the last seconds were, not that something leaked. They are left out of the comparison,
        # but may never be more than the load's threads (requests in flight at once): a connection
        # kept by a cut stream, say, would show there.
        pooled = "tcp to the upstream"
        others_warm = {k: n for k, n in files_warm.items() if k != pooled}
        others_end = {k: n for k, n in files_end.items() if k != pooled}
        if files_warm[pooled] != files_end[pooled]:
            report.append(f"  idle upstream connections in the client's pool: {files_warm[pooled]} then "
                          f"{files_end[pooled]}")
        if max(files_warm[pooled], files_end[pooled]) > args.threads:
            failures.append(f"the gateway holds {files_warm[pooled]} then {files_end[pooled]} connections to the "
                            f"upstream at quiet moments, more than the {args.threads} requests ever in flight")
        if others_warm != others_end:
            diff = {k: (others_warm.get(k, 0), others_end.get(k, 0))
                    for k in set(others_warm) | set(others_end) if others_warm.get(k, 0) != others_end.get(k, 0)}
            failures.append(f"open files differ between the two quiet moments (kind: after the warm-up, "
                            f"at the end): {diff}")
        fds_seen = [n for _, _, _, n in samples]
        report.append(f"  open files while loaded: {min(fds_seen)} to {max(fds_seen)}")

        # --- SIGTERM, then every admitted request's record.
        status = gateway.stop()
        report.append(f"gateway exit status on SIGTERM: {status}")
        if status != 0:
            failures.append(f"the gateway exited {status} on SIGTERM:\n{gateway.stderr_tail()}")
        db = sqlite3.connect(f"file:{os.path.join(work, 'usage.sqlite')}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT request_id, outcome, stream FROM usage_records").fetchall()
        finally:
            db.close()
        records = collections.defaultdict(list)
        for rid, outcome, stream in rows:
            records[rid].append((outcome, bool(stream)))
        missing = [rid for rid in admitted if rid not in records]
        twice = [rid for rid in admitted if len(records.get(rid, ())) > 1]
        wrong = []
        for rid, kind in admitted.items():
            for outcome, stream in records.get(rid, ()):
                expected = ("ok",) if kind != "cut" else ("ok", "cancelled")
                if outcome not in expected or stream != (kind != "whole"):
                    wrong.append(f"{rid}: {outcome}, stream {stream}")
        by_outcome = collections.Counter(f"{kind} {outcome}" for rid, kind in admitted.items()
                                         for outcome, _ in records.get(rid, ()))
        others = len([rid for rid in records if rid not in admitted])
        report.append(f"usage records: {len(rows)} rows; {len(admitted) - len(missing)} of {len(admitted)} "
                      f"admitted requests found ({', '.join(f'{n} {k}' for k, n in sorted(by_outcome.items()))}); "
                      f"{others} records of other requests")
        spill = os.path.join(work, "usage.spill")
        if os.path.exists(spill) and os.path.getsize(spill):
            report.append(f"  the spill file holds {os.path.getsize(spill)} bytes")
        if missing:
            kinds = collections.Counter(admitted[rid] for rid in missing)
            failures.append(f"{len(missing)} admitted requests have no usage record ({dict(kinds)}): "
                            + ", ".join(missing[:10]))
        if twice:
            failures.append(f"{len(twice)} requests have more than one record: {', '.join(twice[:10])}")
        if wrong:
            failures.append(f"{len(wrong)} records say otherwise than the answer: {'; '.join(wrong[:10])}")
    except Failed as e:
        failures.append(str(e))
    except KeyboardInterrupt as e:
        failures.append(f"interrupted ({e or 'Ctrl-C'})")
    finally:
        stop_keys.set()
        if load is not None:
            load.stop.set()
            with load.lock:
                load.lock.notify_all()
        if sampler is not None:
            sampler.stop.set()
        if gateway is not None:
            gateway.stop(timeout=30)
        if redis is not None:
            redis.kill()
        if upstream is not None:
            upstream.shutdown()
            upstream.server_close()
        tail = gateway.stderr_tail(2000) if gateway is not None and failures else ""
        if args.keep:
            log(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    for line in report:
        log(line)
    if failures:
        for failure in failures:
            print(f"soak: FAILED: {failure}", file=sys.stderr, flush=True)
        if tail:
            print(f"soak: the gateway's log ends with:\n{tail}", file=sys.stderr, flush=True)
        if not args.keep:
            print("soak: --keep keeps the work directory (logs, configuration, usage.sqlite)",
                  file=sys.stderr, flush=True)
        sys.exit(1)
    log("ok")


if __name__ == "__main__":
    main()
