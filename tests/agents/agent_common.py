"""Shared plumbing of the agent drivers (claude_code.py, codex.py).

Runs an agent binary in its own process group with a timeout (the whole group is killed when it
runs over), builds a clean environment that keeps the agent off the network and away from the
caller's keys, and saves recorded mock requests one JSON file each.
"""

import json
import os
import re
import signal
import subprocess

MARKER = "llmroute-tool-ok"
PROMPT = "Run the shell command echo llmroute-tool-ok and tell me what it printed"


def clean_env(home, extra):
    """PATH, locale and a throwaway HOME only, plus `extra`: no ambient API keys or proxies."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "LANG": "C.UTF-8",
           "TERM": "dumb", "NO_COLOR": "1"}
    env.update(extra)
    return env


def run(cmd, env, cwd, timeout):
    """(exit status or None on timeout, stdout, stderr) of `cmd`; kills its group on timeout."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, out, err


def save_captures(requests, directory):
    """Each recorded request as DIR/NNN-METHOD-path.json."""
    os.makedirs(directory, exist_ok=True)
    for req in requests:
        slug = re.sub(r"[^A-Za-z0-9]+", "_", req["path"].split("?")[0]).strip("_")
        name = f"{req['seq']:03d}-{req['method']}-{slug}.json"
        with open(os.path.join(directory, name), "w") as f:
            json.dump(req, f, indent=2)


def check(rc, answer, out, err):
    """Failures (a list of strings) of one agent run: exit status 0 and the marker in the answer."""
    problems = []
    if rc is None:
        problems.append("timed out")
    elif rc != 0:
        problems.append(f"exit status {rc}")
    if MARKER not in (answer or ""):
        problems.append(f"final answer lacks {MARKER!r}: {answer!r}")
    if problems:
        problems.append("stdout tail: " + out[-2000:])
        problems.append("stderr tail: " + err[-2000:])
    return problems
