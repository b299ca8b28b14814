"""Real Redis servers for the tests, shared by every suite: `redis-server`
on free 127.0.0.1 ports with persistence off, in a temporary directory,
stopped at the end; Redis Clusters made with `redis-cli --cluster create`;
sentinels. The pytest fixtures over them (`server`, `own_server`,
`cluster`) are in conftest.py.

Without redis-server the tests fail (ci/test installs it) instead of
skipping: a global limit untested against Redis is not tested."""

from __future__ import annotations

import pathlib
import shutil
import socket
import subprocess
import time
import uuid
from typing import Any, Optional, Sequence

import pytest
import redis
import redis.asyncio.cluster
import redis.cluster

HOST = "127.0.0.1"


def fresh_key(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex}"


def binaries() -> tuple[str, str]:
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        pytest.fail(
            "redis-server and redis-cli are needed for the Redis tests "
            "(Debian: apt-get install redis-server redis-tools; ci/test installs them)",
            pytrace=False,
        )
    return server, cli


def free_port(cluster: bool = False) -> int:
    """A free port on 127.0.0.1 (and, for a cluster node, its bus port + 10000)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        if not cluster:
            return port
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind((HOST, port + 10000))
            except OSError:
                continue
        return port
    raise AssertionError("no free port")


def ping(port: int) -> bool:
    c = redis.Redis(host=HOST, port=port, socket_timeout=0.2, socket_connect_timeout=0.2, retry=None)
    try:
        return bool(c.ping())
    except redis.exceptions.RedisError:
        return False
    finally:
        c.close()


class Server:
    """One redis-server process on 127.0.0.1:port: a cluster node with
    `cluster` (its failure detection after `node_timeout` ms), a sentinel
    with `sentinel_conf`; `extra`: more command-line options."""

    def __init__(
        self,
        directory: pathlib.Path,
        port: Optional[int] = None,
        cluster: bool = False,
        node_timeout: int = 2000,
        extra: Sequence[str] = (),
        sentinel_conf: Optional[pathlib.Path] = None,
    ) -> None:
        self.binary = binaries()[0]
        self.dir = directory
        self.cluster = cluster
        self.node_timeout = node_timeout
        self.extra = list(extra)
        self.sentinel_conf = sentinel_conf
        self.port = port if port is not None else free_port(cluster)
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> "Server":
        args = [self.binary]
        if self.sentinel_conf is not None:
            args += [str(self.sentinel_conf), "--sentinel"]
        args += [
            "--port", str(self.port),
            "--bind", HOST,
            "--dir", str(self.dir),
            "--logfile", str(self.dir / f"redis-{self.port}.log"),
        ]
        if self.sentinel_conf is None:
            args += ["--save", "", "--appendonly", "no"]
        if self.cluster:
            args += [
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(self.dir / f"nodes-{self.port}.conf"),
                "--cluster-node-timeout", str(self.node_timeout),
            ]
        self.proc = subprocess.Popen(args + self.extra, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):  # up to ~10 s
            if ping(self.port):
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        log = (self.dir / f"redis-{self.port}.log")
        raise AssertionError(f"redis-server on port {self.port} did not start: {log.read_text()[-2000:] if log.exists() else ''}")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self.proc = None

    def client(self, **kw: Any) -> redis.Redis:
        return redis.Redis(host=HOST, port=self.port, **kw)

    def admin(self, *args: Any) -> Any:
        c = redis.Redis(host=HOST, port=self.port, socket_timeout=5)
        try:
            return c.execute_command(*args)
        finally:
            c.close()


def create_cluster(nodes: Sequence[Server], replicas: int = 0, timeout: float = 60) -> None:
    """`redis-cli --cluster create` over the started `nodes` (`replicas`
    replicas per master); the caller waits for the state it needs."""
    _, cli = binaries()
    subprocess.run(
        [cli, "--cluster", "create", *(f"{HOST}:{n.port}" for n in nodes), "--cluster-replicas", str(replicas), "--cluster-yes"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=timeout,
    )


class Cluster:
    def __init__(self, nodes: list[Server]) -> None:
        self.nodes = nodes

    def client(self) -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster(host=HOST, port=self.nodes[0].port)

    def async_client(self) -> redis.asyncio.cluster.RedisCluster:
        return redis.asyncio.cluster.RedisCluster(host=HOST, port=self.nodes[0].port)

    def owner(self, slot: int) -> int:
        """The port of the master that serves `slot`."""
        for start, end, master, *_ in self.nodes[0].admin("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return int(master[1])
        raise AssertionError(f"slot {slot} is not served")


def run_script(client: redis.Redis, call: Any) -> list[int]:
    """Runs an engine's script call (EVALSHA, then EVAL on NOSCRIPT)."""
    try:
        return list(client.evalsha(call.sha, 1, call.key, *call.args))
    except redis.exceptions.NoScriptError:
        return list(client.eval(call.text, 1, call.key, *call.args))
