#!/usr/bin/env python3
"""Instructions one admission (admit.lua) costs inside redis-server, counted by callgrind.

Called by bench/admit_cost.sh, which writes the scripts to measure into a directory:
admit.lua and settle.lua as llmroute loads them (constants, prelude, helpers, body), and
`contract` (v3, or v1 for the layout of commits before the itpm/otpm counters).

Starts `valgrind --tool=callgrind --toggle-collect=evalShaCommand redis-server` on a free
port, so that only EVALSHA is counted: admissions go through EVALSHA, everything else (the
settlement after each admission, which empties the slot as a router would) through EVAL or
plain commands. Four deployments are filled to their rpm of 1 first; then each case runs
`--warmup` admissions through EVAL (not counted), then `--calls` more through EVALSHA, each
settled. Prints instructions per admission.
Counts do not depend on what else the machine is doing; two runs of the same script agree
to within about 1 % (Lua's garbage collector steps, whose work includes the settlements'
garbage, fall on different calls from one server start to the next).
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

NS = "llmroute:{cost}"
ROOMY = ("roomy", "1000000000", "1000000000000", "100000")
FULL = [("m%d" % i, "1", "0", "0") for i in range(1, 5)]


class Conn:
    """A minimal RESP client (the standard library only)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    def cmd(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self.read()

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2].decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError("unexpected reply %r" % line)


def admit_args(contract, rid, cands, apart):
    """KEYS and ARGV of one admission without a tenant, server time."""
    if contract == "v1":
        keys, argv = [], ["", rid, "700", "600000", str(len(cands)), "0"]
        for name, rpm, tpm, conc in cands:
            keys += ["%s:v1:w:%s" % (NS, name), "%s:v1:s:%s" % (NS, name)]
            argv += ["1", rpm, tpm, conc]
        return keys, argv
    keys = ["%s:v3:r:%s" % (NS, rid)]
    argv = ["", rid, "600000", str(len(cands)), "0"]
    for name, rpm, tpm, conc in cands:
        keys += ["%s:v3:w:%s" % (NS, name), "%s:v3:s:%s" % (NS, name)]
        argv += ["700", "600" if apart else "-", "1", rpm, tpm, "0", "0", conc]
    keys.append("%s:v3:epoch" % NS)
    argv.append("")
    return keys, argv


def settle_args(contract, rid, bucket, apart):
    """KEYS and ARGV settling a reservation on `roomy` with 50 tokens fewer than reserved."""
    if contract == "v1":
        keys = ["%s:v1:w:roomy" % NS, "%s:v1:s:roomy" % NS]
        return keys, ["", rid, bucket, "-50", "0", "1", "0"]
    keys = ["%s:v3:r:%s" % (NS, rid), "%s:v3:w:roomy" % NS, "%s:v3:s:roomy" % NS]
    split = ["-50", "0"] if apart else ["0", "0"]
    return keys, ["", rid, bucket, "-50", "0"] + split + ["1", "0", "0"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def measure(scripts, contract, candidates, apart, warmup, calls):
    admit = open(os.path.join(scripts, "admit.lua")).read()
    settle = open(os.path.join(scripts, "settle.lua")).read()
    port = free_port()
    out = tempfile.NamedTemporaryFile(prefix="callgrind.", delete=False).name
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--toggle-collect=evalShaCommand",
         "--callgrind-out-file=" + out, "redis-server", "--port", str(port), "--save", "",
         "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        conn = None
        for _ in range(300):
            try:
                conn = Conn(port)
                conn.cmd("PING")
                break
            except OSError:
                time.sleep(0.1)
        if conn is None:
            sys.exit("admit_cost: redis-server under valgrind did not start on port %d" % port)
        sha = conn.cmd("SCRIPT", "LOAD", admit)
        for i, full in enumerate(FULL):
            keys, argv = admit_args(contract, "fill-%d" % i, [full], apart)
            conn.cmd("EVAL", admit, len(keys), *keys, *argv)
        cands = [ROOMY] if candidates == 1 else FULL + [ROOMY]
        for i in range(warmup + calls):
            rid = "r-%d" % i
            keys, argv = admit_args(contract, rid, cands, apart)
            # Only the measured calls go through EVALSHA, the one command callgrind counts.
            head = ("EVALSHA", sha) if i >= warmup else ("EVAL", admit)
            reply = conn.cmd(*head, len(keys), *keys, *argv)
            if reply[0] != 1 or reply[2] != len(cands) - 1:
                sys.exit("admit_cost: admission %d was not granted on roomy: %r" % (i, reply))
            keys, argv = settle_args(contract, rid, reply[3], apart)
            if conn.cmd("EVAL", settle, len(keys), *keys, *argv) != [1]:
                sys.exit("admit_cost: settling admission %d failed" % i)
    finally:
        try:
            Conn(port).sock.sendall(b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n")
        except OSError:
            pass
        server.wait(timeout=120)
    total = 0
    with open(out) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                total = int(line.split()[1])
                break
    os.unlink(out)
    return total / calls


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scripts", help="directory holding admit.lua, settle.lua and contract")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args()
    contract = open(os.path.join(a.scripts, "contract")).read().strip()
    cases = [(1, False), (5, False)] + ([(1, True), (5, True)] if contract == "v3" else [])
    for candidates, apart in cases:
        per = measure(a.scripts, contract, candidates, apart, a.warmup, a.calls)
        what = "%d candidate%s%s" % (candidates, "" if candidates == 1 else "s (4 full)",
                                     ", input and output counted apart" if apart else "")
        print("admit.lua (%s), %s: %.0f instructions per admission" % (contract, what, per))


main()
