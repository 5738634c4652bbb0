"""The mock's limiters: an exact sliding window or Anthropic's token bucket, per provider account.

--limiter window (default): an exact sliding window of 60 s: a request admitted at t counts in
  every window (t-60, t]. Stricter than a token bucket: any sending pattern whose every 60 s
  window stays under L also never empties a bucket of L that refills at L/60 per second, so
  0 refusals here implies 0 under Anthropic's own limiter.
--limiter bucket: Anthropic's documented algorithm (a token bucket of capacity L, refilled
  continuously at L/60 per second; OTPM's correction gives back max_tokens - output).
"""

import collections
import math
import time

WINDOW_S = 60.0


class Window:
    """An exact sliding window of WINDOW_S seconds over (time, amount) entries."""

    kind = "window"

    def __init__(self, limit):
        self.limit = limit
        self.q = collections.deque()
        self.sum = 0

    def _expire(self, now):
        q = self.q
        while q and q[0][0] <= now - WINDOW_S:
            e = q.popleft()
            e[2] = False
            self.sum -= e[1]

    def used(self, now):
        self._expire(now)
        return self.sum

    def wait_for(self, now, amount):
        """0 if `amount` fits now, else seconds until it would (inf if it never can)."""
        if not self.limit:
            return 0.0
        self._expire(now)
        if self.sum + amount <= self.limit:
            return 0.0
        if amount > self.limit:
            return math.inf
        need = self.sum + amount - self.limit
        freed = 0
        for t, a, _ in self.q:
            freed += a
            if freed >= need:
                return max(0.001, t + WINDOW_S - now)
        return WINDOW_S

    def add(self, now, amount):
        e = [now, amount, True]
        self.q.append(e)
        self.sum += amount
        return e

    def correct(self, entry, amount, now):
        if entry[2]:
            self.sum += amount - entry[1]
        entry[1] = amount

    def reset_in(self, now):
        """Seconds until everything counted now has left the window."""
        self._expire(now)
        return (self.q[-1][0] + WINDOW_S - now) if self.q else 0.0


class Bucket:
    """A token bucket of capacity `limit`, refilled continuously at limit / 60 per second."""

    kind = "bucket"

    def __init__(self, limit):
        self.limit = limit
        self.rate = limit / WINDOW_S if limit else 0
        self.level = float(limit)
        self.t = time.monotonic()

    def _fill(self, now):
        if self.limit:
            self.level = min(self.limit, self.level + (now - self.t) * self.rate)
        self.t = now

    def used(self, now):
        self._fill(now)
        return max(0, round(self.limit - self.level))

    def wait_for(self, now, amount):
        if not self.limit:
            return 0.0
        self._fill(now)
        if amount <= self.level:
            return 0.0
        if amount > self.limit:
            return math.inf
        return (amount - self.level) / self.rate

    def add(self, now, amount):
        self._fill(now)
        self.level -= amount
        return [now, amount, True]

    def correct(self, entry, amount, now):
        self._fill(now)
        self.level = min(self.limit, self.level + entry[1] - amount)
        entry[1] = amount

    def reset_in(self, now):
        self._fill(now)
        return (self.limit - self.level) / self.rate if self.limit else 0.0


class Peak:
    """The most any 60 s window held of a counterfactual count (e.g. whole prompts)."""

    def __init__(self):
        self.w = Window(0)
        self.peak = 0

    def add(self, now, amount):
        self.w.add(now, amount)
        self.peak = max(self.peak, self.w.used(now))


class Family:
    """One provider account: its limiters (dims -> limiter), peaks and counters."""

    def __init__(self, name, limits, limiter_cls):
        self.name = name
        self.limits = dict(limits)
        self.lim = {d: limiter_cls(v) for d, v in limits.items()}
        self.peak = {d: 0 for d in limits}
        self.whole_prompt = Peak()   # ITPM had cache reads counted (the whole prompt)
        self.requests = 0
        self.admitted = 0
        self.rejected = collections.Counter()
        self.tokens = collections.Counter()

    def check(self, now, need):
        """(ok, wait_s, dims refused) for `need` = {dim: amount}."""
        waits = {d: self.lim[d].wait_for(now, a) for d, a in need.items() if self.limits.get(d)}
        refused = [d for d, w in waits.items() if w > 0]
        return not refused, max([waits[d] for d in refused], default=0.0), refused

    def admit(self, now, need):
        entries = {d: self.lim[d].add(now, a) for d, a in need.items()}
        for d in need:
            self.peak[d] = max(self.peak[d], self.lim[d].used(now))
        return entries

    def used(self, now):
        return {d: self.lim[d].used(now) for d in self.lim}

    def stats(self):
        return {"requests": self.requests, "admitted": self.admitted,
                "rejected_429": sum(self.rejected.values()),
                "rejected_by": dict(self.rejected), "limits": self.limits,
                "peak_window": self.peak, "peak_window_whole_prompt": self.whole_prompt.peak,
                "window_now": self.used(time.monotonic()), "tokens": dict(self.tokens)}
