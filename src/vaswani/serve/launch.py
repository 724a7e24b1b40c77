"""`vaswani serve` in a subprocess, ready when its /health answers: for tests, benchmarks and notebooks.

with launch("runs/quick") as server:
    urllib.request.urlopen(server.url + "/health")
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Server:
    process: subprocess.Popen
    url: str
    log: Path  # the server's stdout and stderr (a file, so a chatty server never blocks on a full pipe)

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (requests in flight finish), then the exit status."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(
    model_dir: str | Path,
    *args: str,
    port: int | None = None,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> Server:
    """Start `vaswani serve MODEL_DIR ARGS` on 127.0.0.1 and return once /health answers 200. `env`: variables
    added to this process's environment for the server (e.g. OMP_NUM_THREADS, torch's threads)."""
    port = port or free_port()
    log = Path(tempfile.mkstemp(prefix="vaswani-serve-", suffix=".log")[1])
    with open(log, "w", encoding="utf-8") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "vaswani.cli", "serve", str(model_dir), "--port", str(port), *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env} if env else None,
        )
    server = Server(process, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(f"{server.url}/health", timeout=1) as response:
                if response.status == 200:
                    return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"vaswani serve did not start: {server.output()[-2000:]}")
