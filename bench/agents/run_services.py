"""The services every phase shares: the mock upstream and, with --ledger redis, redis-server."""

import os
import socket
import subprocess
import sys
import time

from run_procs import HERE, free_port, start


def start_mock(args, out_dir):
    """mock_anthropic.py on a free port; its base URL."""
    port_file = os.path.join(out_dir, "mock.port")
    mock_log = open(os.path.join(out_dir, "mock.log"), "w")
    start("mock", [sys.executable, os.path.join(HERE, "mock_anthropic.py"), "--port", "0",
                   "--port-file", port_file, "--exit-after", str(args.exit_after)],
          stdout=mock_log, stderr=subprocess.STDOUT)
    for _ in range(200):
        if os.path.exists(port_file):
            break
        time.sleep(0.05)
    else:
        raise SystemExit("run.py: the mock did not start")
    return f"http://127.0.0.1:{open(port_file).read().strip()}"


def start_redis(out_dir):
    """A throwaway redis-server on a free port; its host:port."""
    port = free_port()
    start("redis", ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--dir", out_dir, "--daemonize", "no", "--logfile",
                    os.path.join(out_dir, "redis.log")])
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16) == b"+PONG\r\n":
                    return f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    raise SystemExit("run.py: redis-server did not start")


def flush_redis(redis):
    """FLUSHALL: each gateway phase starts with an empty ledger."""
    subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", redis.split(":")[1], "FLUSHALL"],
                   capture_output=True)
