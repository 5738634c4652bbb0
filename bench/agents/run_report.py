"""The report: how it was run, on what binary, the table and its notes (report.md)."""

import hashlib
import os
import subprocess
import sys
import time

from run_procs import REPO
from run_scenarios import SCENARIOS
from run_table import table


def provenance(path):
    """The binary's path and sha256 prefix; the repository's commit when it is the repo's own."""
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    note = f"llmroute `{path}` (sha256 {digest}"
    if os.path.realpath(path).startswith(os.path.realpath(REPO) + os.sep):
        head = subprocess.run(["git", "-C", REPO, "log", "-1", "--format=%h"],
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        note += f", tree at {head}{' with uncommitted changes' if dirty else ''}"
    return note + ")"


def report(args, scenarios, records, elapsed, out_dir):
    """report.md's text."""
    binary = provenance(args.llmroute)
    tab, notes = table(records)
    cmd = "python3 bench/agents/run.py " + " ".join(sys.argv[1:])
    when = time.strftime('%Y-%m-%d %H:%M', time.gmtime())
    return "\n".join([
        f"## Agent traffic through `llmroute serve` ({when} UTC)",
        "", f"`{cmd}`: seed {args.seed}, {args.duration:g} s per phase, mock limiter "
            f"{args.limiter}{', no rate-limit headers' if args.no_ratelimit_headers else ''}"
            f", ledger {args.ledger}, {os.cpu_count()} cores; {binary}", "",
        "Scenarios: " + "; ".join(f"{n}: {SCENARIOS[n]['what']}" for n in scenarios), "",
        tab, "", notes, "", f"Runs took {int(elapsed // 60)} min {int(elapsed % 60)} s. "
                            f"Results: {out_dir}", ""])
