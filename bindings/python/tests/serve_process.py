"""A real ``ratebound serve`` process on free 127.0.0.1 ports, for
test_serve_grpc.py: its configuration written to a directory (one domain
per file), started, awaited through the gRPC health service, and stopped
with SIGTERM (killed if it has not stopped 10 s later).

The binary: ``RATEBOUND_BIN``, else ``$CARGO_TARGET_DIR/debug/ratebound``,
else ``<repo>/target/debug/ratebound`` (ci/test builds it with ``cargo test``
before the Python step and passes ``RATEBOUND_BIN``). None there is an
error, not a skip: this suite is the Python client's view of the server."""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import time
import urllib.request
from typing import Callable, Optional

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

# bindings/python/tests/ -> the repository.
REPO = pathlib.Path(__file__).resolve().parent.parent.parent.parent
# The RLS service's full name, as registered with the health service.
RLS_SERVICE = "envoy.service.ratelimit.v3.RateLimitService"


def binary() -> pathlib.Path:
    """The ``ratebound`` binary to run; AssertionError naming where it was
    looked for when there is none."""
    given = os.environ.get("RATEBOUND_BIN")
    if given:
        path = pathlib.Path(given)
        assert path.is_file() and os.access(path, os.X_OK), (
            f"RATEBOUND_BIN={given} is not an executable file"
        )
        return path
    tried = []
    target = os.environ.get("CARGO_TARGET_DIR")
    if target:
        tried.append(pathlib.Path(target) / "debug" / "ratebound")
    tried.append(REPO / "target" / "debug" / "ratebound")
    for path in tried:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise AssertionError(
        "no ratebound binary: set RATEBOUND_BIN, or build it "
        "(`cargo build -p ratebound-cli`); looked at "
        + ", ".join(str(p) for p in tried)
    )


def free_port() -> int:
    """A port free on 127.0.0.1 a moment ago (the server binds it next;
    a start that loses the race is retried with new ports)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Serve:
    """One ``ratebound serve`` process over the YAML files ``files``
    (name → text) written to ``directory``."""

    def __init__(self, directory: pathlib.Path, files: dict[str, str]) -> None:
        self.directory = directory
        self.config = directory / "config"
        self.config.mkdir()
        for name, text in files.items():
            (self.config / name).write_text(text)
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.grpc_addr = ""
        self.http_addr = ""
        self.channel: Optional[grpc.Channel] = None
        self.log = directory / "serve.log"

    def start(self, attempts: int = 3) -> "Serve":
        """Starts the process and waits until its health service says
        SERVING (at most 30 s per attempt: a debug build on a loaded
        machine); a start that fails (a port taken meanwhile) is retried
        with new ports, ``attempts`` times in all."""
        last = ""
        for _ in range(attempts):
            grpc_port, http_port = free_port(), free_port()
            self.grpc_addr = f"127.0.0.1:{grpc_port}"
            self.http_addr = f"127.0.0.1:{http_port}"
            with open(self.log, "wb") as log:
                self.process = subprocess.Popen(
                    [
                        str(binary()),
                        "serve",
                        "--config",
                        str(self.config),
                        "--grpc",
                        self.grpc_addr,
                        "--http",
                        self.http_addr,
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            self.channel = grpc.insecure_channel(self.grpc_addr)
            if self._await_serving(30.0):
                return self
            last = self.log.read_text(errors="replace")
            self.stop()
        raise AssertionError(f"ratebound serve did not start; its output:\n{last}")

    def _await_serving(self, within: float) -> bool:
        assert self.process is not None and self.channel is not None
        health = health_pb2_grpc.HealthStub(self.channel)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                answer = health.Check(
                    health_pb2.HealthCheckRequest(service=RLS_SERVICE), timeout=1.0
                )
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    return True
            except grpc.RpcError:
                pass
            time.sleep(0.05)
        return False

    def http_get(self, path: str) -> tuple[int, str]:
        """``GET path`` on the HTTP address: the status and the body."""
        with urllib.request.urlopen(f"http://{self.http_addr}{path}", timeout=10) as r:
            status: int = r.status
            return status, r.read().decode()

    def stop(self) -> Optional[int]:
        """SIGTERM, then up to 10 s for the process to end, then SIGKILL.
        The exit status (None if it was never started)."""
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        p, self.process = self.process, None
        if p is None:
            return None
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        return p.returncode


def metric(text: str, series: str) -> int:
    """The value of the Prometheus sample ``series`` (name and labels as
    written) in ``text``; AssertionError when absent."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return int(float(line[len(series) + 1 :]))
    raise AssertionError(f"no sample {series} in:\n{text}")


# The ``serve`` fixture (conftest.py): starts a server over the files given
# (name → YAML text).
Start = Callable[[dict[str, str]], Serve]
