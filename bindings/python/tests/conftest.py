"""Fixtures shared by the suites: real Redis servers (redis_servers.py).
`server` is one per test module, `own_server` one per test (the fault
tests kill theirs), `cluster` a 3-master Redis Cluster per module;
`serve`, real `ratebound serve` processes (serve_process.py)."""

from __future__ import annotations

import gc
import pathlib
import time
import warnings
from typing import TYPE_CHECKING, Iterator

import pytest

from redis_servers import Cluster, Server, create_cluster

if TYPE_CHECKING:
    from serve_process import Serve, Start


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("redis")).start()
    yield s
    s.stop()


@pytest.fixture
def own_server(tmp_path: pathlib.Path) -> Iterator[Server]:
    s = Server(tmp_path).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("cluster")
    nodes = [Server(directory, cluster=True) for _ in range(3)]
    try:
        for n in nodes:
            n.start()
        create_cluster(nodes)
        for _ in range(300):  # up to ~15 s
            states = [n.admin("CLUSTER", "INFO") for n in nodes]
            if all(b"cluster_state:ok" in s for s in states):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the cluster did not reach cluster_state:ok")
        yield Cluster(nodes)
    finally:
        for n in nodes:
            n.stop()


@pytest.fixture(scope="module", autouse=True)
def _collected_before() -> None:
    """Before each module: collects what earlier modules left for the
    garbage collector (e.g. unclosed redis.asyncio clients and their
    sockets) with warnings ignored, so that their ResourceWarnings do not
    surface in the next module's tests, which turn warnings into errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gc.collect()


@pytest.fixture
def serve(tmp_path: pathlib.Path) -> Iterator[Start]:
    """Starts ``ratebound serve`` over the given files (name → YAML);
    each is stopped with SIGTERM after the test, which must end it with
    status 0 (graceful shutdown). Imported here, not above: only this
    fixture needs grpcio."""
    from serve_process import Serve

    started: list[Serve] = []

    def start(files: dict[str, str]) -> Serve:
        directory = tmp_path / f"serve{len(started)}"
        directory.mkdir()
        s = Serve(directory, files)
        started.append(s)
        return s.start()

    yield start
    for s in started:
        alive = s.process is not None and s.process.poll() is None
        status = s.stop()
        assert not alive or status == 0, (
            f"ratebound serve exited {status} on SIGTERM:\n{s.log.read_text()}"
        )
