"""The processes run.py starts: where their scripts are, starting them, stopping them all."""

import ctypes
import os
import signal
import socket
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

PROCS = []      # (name, Popen) of everything started here


def _pdeathsig():
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def start(name, cmd, **kw):
    """Starts `cmd`, to be stopped on exit (and on our death: PR_SET_PDEATHSIG)."""
    p = subprocess.Popen(cmd, preexec_fn=_pdeathsig, **kw)
    PROCS.append((name, p))
    return p


def stop(p, timeout=35):
    """SIGTERM, then SIGKILL after `timeout` seconds."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def cleanup():
    """Stops everything started here, the last started first."""
    for _, p in reversed(PROCS):
        try:
            stop(p, 5)
        except Exception:
            pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_ticks(pid):
    """utime + stime of process `pid`, in clock ticks, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])       # utime + stime
    except OSError:
        return None
