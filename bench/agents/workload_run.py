"""The run: K session slots in parallel, turns back to back, each request measured.

K session slots run in parallel, turns back to back, for --duration seconds (no turn starts
after it) or until --max-turns turns in all. Slot i's j-th session is seeded by (seed, i, j):
the same seed gives the same sessions straight to the mock and through the gateway (the mock's
answers follow from the last message's text). Each request carries `x-bench-id:
<slot>-<session>-<turn>`; a 429 or 529 is retried after its `retry-after` (at most --retries
times, like Claude Code's client), other errors end the session's turn loop for that session
(the next session starts).
"""

import asyncio
import json
import math
import os
import random
import time

from workload_claude import ClaudeCode
from workload_codex import Codex
from workload_http import Conn, HttpError
from workload_session import shared_content


class Run:
    """The sessions' slots, the per-request rows and the event loop's lag."""

    def __init__(self, args):
        self.args = args
        self.shared = shared_content(args)
        self.rows = []
        self.t_start = None
        self.deadline = None
        self.turns = 0
        self.stop = False
        self.lag = []

    def session(self, slot, index):
        cls = ClaudeCode if self.args.kind == "messages" else Codex
        s = cls(self.args, slot, index, self.shared)
        return s

    def may_start(self):
        if self.stop or time.perf_counter() >= self.deadline:
            return False
        if self.args.max_turns and self.turns >= self.args.max_turns:
            return False
        self.turns += 1
        return True

    async def slot(self, slot):
        args = self.args
        conn = Conn(args.url)
        index = 0
        try:
            while not self.stop:
                s = self.session(slot, index)
                ok = True
                while ok and s.turn < args.session_turns:
                    if not self.may_start():
                        return
                    ok = await self.turn(conn, s)
                    s.turn += 1
                index += 1
        finally:
            conn.close()

    async def turn(self, conn, s):
        """One turn: its request, retried on 429/529/503; its row; the session advanced."""
        args = self.args
        body = s.body()
        expected = s.expected_prompt()
        bench = f"{s.slot}-{s.index}-{s.turn}"
        headers = dict(s.headers(), **{"x-bench-id": bench})
        row = {"bench_id": bench, "slot": s.slot, "session": s.index, "turn": s.turn,
               "bytes": len(body), "attempts": 0, "n429": 0, "n529": 0,
               "expected_prompt": expected}
        t_first_send = None
        while True:
            st, on_event = s.collector()
            row["attempts"] += 1
            try:
                r = await asyncio.wait_for(conn.post(s.path, headers, body, on_event),
                                           args.request_timeout)
            except (HttpError, asyncio.TimeoutError, OSError, ValueError) as e:
                conn.close()
                row.update(ok=False, error=f"{type(e).__name__}: {e}"[:300])
                break
            if t_first_send is None:
                t_first_send = r["t_send"]
            status = r["status"]
            if status in (429, 529, 503) and row["attempts"] <= args.retries:
                await retry_wait(row, r, status)
                continue
            self.outcome(row, r, st, t_first_send)
            break
        self.rows.append(row)
        if not row["ok"]:
            return False
        return s.advance(st)

    def outcome(self, row, r, st, t_first_send):
        """The row's end: an error, or a full answer and its timings."""
        status = r["status"]
        if status != 200 or st["error"] or st["stop"] is None:
            row.update(ok=False, status=status, error=(
                (r["body"][:300].decode("utf-8", "replace")) if status != 200
                else json.dumps(st["error"] or "stream ended without its last event")[:300]))
            if status == 429:
                row["n429"] += 1
            return
        row.update(ok=True, status=status, stop=st["stop"], usage=st["usage"],
                   latency_ms=(r["t_end"] - r["t_send"]) * 1000,
                   ttfb_ms=(r["t_event"] - r["t_send"]) * 1000,
                   status_ms=(r["t_status"] - r["t_send"]) * 1000,
                   total_ms=(r["t_end"] - t_first_send) * 1000,
                   t=r["t_send"] - self.t_start,
                   provider=r["headers"].get("x-llmroute-provider"))

    async def lag_probe(self):
        """The event loop's lateness: a sleep of 10 ms, how late it wakes."""
        while not self.stop:
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            self.lag.append((time.perf_counter() - t - 0.01) * 1000)

    async def main(self):
        """Runs every slot to the end; (elapsed s, the client's CPU s)."""
        args = self.args
        self.t_start = time.perf_counter()
        self.deadline = self.t_start + args.duration
        cpu0 = sum(os.times()[:2])
        probe = asyncio.create_task(self.lag_probe())
        await asyncio.gather(*(self.slot(i) for i in range(args.k)))
        self.stop = True
        await probe
        elapsed = time.perf_counter() - self.t_start
        cpu = sum(os.times()[:2]) - cpu0
        return elapsed, cpu


async def retry_wait(row, r, status):
    """Counts a 429/529/503 and sleeps its retry-after (plus up to 0.25 s)."""
    row["n429" if status == 429 else "n529"] += 1
    wait = float(r["headers"].get("retry-after") or 1)
    row.setdefault("retry_waits", []).append(wait)
    await asyncio.sleep(wait + random.uniform(0, 0.25))


def pct(values, q):
    """The q-th percentile (nearest rank), or None."""
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q / 100 * len(v)) - 1))]
