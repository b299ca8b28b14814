"""Fixtures shared by the suites: real Redis servers (redis_servers.py).
`server` is one per test module, `own_server` one per test (the fault
tests kill theirs), `cluster` a 3-master Redis Cluster per module."""

from __future__ import annotations

import gc
import pathlib
import time
import warnings
from typing import Iterator

import pytest

from redis_servers import Cluster, Server, create_cluster


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
