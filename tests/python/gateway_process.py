"""`llmroute serve` as the Python tests run it: on a free loopback port, over a configuration
file, its state in the file's folder, no Redis; stopped by SIGTERM, after which it must have
exited 0 with none of the given secrets in its log.

    with serving(llmroute, config_path, secrets=("S3CRET", KEY), UP_KEY="...") as gateway:
        gateway.base   # http://127.0.0.1:PORT, without /v1
"""

import contextlib
import os
import signal
import subprocess

PREFIX = "llmroute gateway listening on "


class Gateway:
    """A running gateway: its base URL, and once stopped, its log."""

    def __init__(self, process):
        self.process = process
        self.base = None
        self.stderr = ""


@contextlib.contextmanager
def serving(llmroute, config, secrets=(), **env):
    """The gateway over `config`, with `env` added to the environment."""
    environment = dict(os.environ, LLMROUTE_STATE_DIR=os.path.join(os.path.dirname(config), "state"))
    environment.update(env)
    environment.pop("REDIS_URL", None)
    environment.pop("LLMROUTE_USAGE", None)
    process = subprocess.Popen([llmroute, "--config", config, "serve", "--listen", "127.0.0.1:0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment,
                               text=True)
    gateway = Gateway(process)
    try:
        first = process.stdout.readline().strip()
        assert first.startswith(PREFIX), f"unexpected first line: {first!r}"
        gateway.base = first[len(PREFIX):]
        yield gateway
    finally:
        process.send_signal(signal.SIGTERM)
        _, gateway.stderr = process.communicate(timeout=30)
    assert process.returncode == 0, f"exit {process.returncode}: {gateway.stderr}"
    for secret in secrets:
        assert secret not in gateway.stderr, "a secret appeared in the gateway's log"
