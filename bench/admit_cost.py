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
settled. Prints instructions per admission. With `--wall ROUNDS` it times the same loop
(5,000 admissions) in a plain redis-server instead, by `INFO commandstats`, alternating with the
scripts of `--against` when given.
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
import zlib

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


def admit_args(contract, rid, cands, apart, lines):
    """KEYS and ARGV of one admission without a tenant, server time (`lines`: the scripts keep
    lines of waiting requests, whose keys and ticket come after the candidates)."""
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
    if lines:
        for name, _, _, _ in cands:
            keys += ["%s:v3:q:%s" % (NS, name), "%s:v3:qx:%s" % (NS, name)]
        # A request without a ticket of its own: its reservation id, joining no line.
        argv += ["%016xi" % zlib.crc32(rid.encode()), "0", "0", "", "%s:v3:wake" % NS]
    keys.append("%s:v3:epoch" % NS)
    argv.append("")
    return keys, argv


def settle_args(contract, rid, bucket, apart, lines):
    """KEYS and ARGV settling a reservation on `roomy` with 50 tokens fewer than reserved."""
    if contract == "v1":
        keys = ["%s:v1:w:roomy" % NS, "%s:v1:s:roomy" % NS]
        return keys, ["", rid, bucket, "-50", "0", "1", "0"]
    keys = ["%s:v3:r:%s" % (NS, rid), "%s:v3:w:roomy" % NS, "%s:v3:s:roomy" % NS]
    split = ["-50", "0"] if apart else ["0", "0"]
    # One scope, no account, no per-day limit ('-'), no report.
    argv = ["", rid, bucket, "-50", "0"] + split + ["1", "0", "-", "0"]
    if lines:
        keys += ["%s:v3:q:roomy" % NS, "%s:v3:qx:roomy" % NS]
        argv.append("%s:v3:wake" % NS)
    return keys, argv


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_server(valgrind_out=None):
    """A redis-server on a free port (under callgrind when `valgrind_out` names its output)."""
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"]
    if valgrind_out:
        argv = ["valgrind", "--tool=callgrind", "--toggle-collect=evalShaCommand",
                "--callgrind-out-file=" + valgrind_out] + argv
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            conn = Conn(port)
            conn.cmd("PING")
            return server, port, conn
        except OSError:
            time.sleep(0.1)
    server.kill()
    sys.exit("admit_cost: redis-server did not start on port %d" % port)


def stop_server(server, port):
    try:
        Conn(port).sock.sendall(b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n")
    except OSError:
        pass
    server.wait(timeout=120)


def admissions(conn, scripts, contract, candidates, apart, warmup, calls):
    """Fills the four full deployments, then runs `warmup` admissions through EVAL and `calls`
    through EVALSHA (the measured ones), each settled through EVAL."""
    admit = open(os.path.join(scripts, "admit.lua")).read()
    settle = open(os.path.join(scripts, "settle.lua")).read()
    lines = "line_join(" in admit
    conn.cmd("FLUSHALL")
    sha = conn.cmd("SCRIPT", "LOAD", admit)
    for i, full in enumerate(FULL):
        keys, argv = admit_args(contract, "fill-%d" % i, [full], apart, lines)
        conn.cmd("EVAL", admit, len(keys), *keys, *argv)
    cands = [ROOMY] if candidates == 1 else FULL + [ROOMY]
    for i in range(warmup + calls):
        if i == warmup:
            conn.cmd("CONFIG", "RESETSTAT")
        rid = "r-%d" % i
        keys, argv = admit_args(contract, rid, cands, apart, lines)
        head = ("EVALSHA", sha) if i >= warmup else ("EVAL", admit)
        reply = conn.cmd(*head, len(keys), *keys, *argv)
        if reply[0] != 1 or reply[2] != len(cands) - 1:
            sys.exit("admit_cost: admission %d was not granted on roomy: %r" % (i, reply))
        keys, argv = settle_args(contract, rid, reply[3], apart, lines)
        if conn.cmd("EVAL", settle, len(keys), *keys, *argv) != [1]:
            sys.exit("admit_cost: settling admission %d failed" % i)


def measure(scripts, contract, candidates, apart, warmup, calls):
    """Instructions per admission, counted by callgrind (EVALSHA only)."""
    out = tempfile.NamedTemporaryFile(prefix="callgrind.", delete=False).name
    server, port, conn = start_server(out)
    try:
        admissions(conn, scripts, contract, candidates, apart, warmup, calls)
    finally:
        stop_server(server, port)
    total = 0
    with open(out) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                total = int(line.split()[1])
                break
    os.unlink(out)
    return total / calls


def wall(sets, rounds, calls):
    """Microseconds per admission inside a plain redis-server (INFO commandstats, EVALSHA
    only), each set of scripts in turn, `rounds` times; prints each one's median and range."""
    server, port, conn = start_server()
    seen = {}
    try:
        for _ in range(rounds):
            for name, scripts, contract in sets:
                for candidates in (1, 5):
                    admissions(conn, scripts, contract, candidates, False, 200, calls)
                    stats = conn.cmd("INFO", "commandstats")
                    per = [float(line.split("usec_per_call=")[1].split(",")[0])
                           for line in stats.splitlines() if line.startswith("cmdstat_evalsha:")]
                    seen.setdefault((name, candidates), []).extend(per)
    finally:
        stop_server(server, port)
    for (name, candidates), values in sorted(seen.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        values.sort()
        print("admit.lua of %s, %d candidate%s: median %.1f µs inside Redis (%.1f–%.1f over %d rounds)"
              % (name, candidates, "" if candidates == 1 else "s (4 full)",
                 values[len(values) // 2], values[0], values[-1], len(values)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scripts", help="directory holding admit.lua, settle.lua and contract")
    ap.add_argument("--against", help="with --wall: a second such directory, measured in turn")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--wall", type=int, metavar="ROUNDS",
                    help="time inside a plain redis-server instead, 5,000 admissions a round")
    a = ap.parse_args()
    contract = open(os.path.join(a.scripts, "contract")).read().strip()
    if a.wall:
        sets = [(open(os.path.join(a.scripts, "name")).read().strip(), a.scripts, contract)]
        if a.against:
            other = open(os.path.join(a.against, "contract")).read().strip()
            sets.append((open(os.path.join(a.against, "name")).read().strip(), a.against, other))
        wall(sets, a.wall, 5000)
        return
    cases = [(1, False), (5, False)] + ([(1, True), (5, True)] if contract == "v3" else [])
    for candidates, apart in cases:
        per = measure(a.scripts, contract, candidates, apart, a.warmup, a.calls)
        what = "%d candidate%s%s" % (candidates, "" if candidates == 1 else "s (4 full)",
                                     ", input and output counted apart" if apart else "")
        print("admit.lua (%s), %s: %.0f instructions per admission" % (contract, what, per))


main()
