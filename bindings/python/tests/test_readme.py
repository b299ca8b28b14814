"""Every ```python block of the package's README (and the repository's),
run as a reader would paste it: each block alone, in a fresh namespace,
top-level `await` allowed (run on an asyncio loop), against a real
redis-server, a Redis Cluster and an HTTP partner on 127.0.0.1.

The only changes made to a block before it runs are the addresses in
`ADDRESSES` below (a README names `redis.internal` and
`https://partner.example`; the test's servers live on 127.0.0.1 ports) and
shared-memory paths (to a temporary directory). Everything else — names,
arguments, the order of calls — runs as printed, so a block that uses a
name it never defines, or an argument the API does not take, fails here.
"""

from __future__ import annotations

import ast
import asyncio
import http.server
import importlib
import pathlib
import re
import threading
import warnings
from typing import Any, Callable, Iterator

import pytest

from redis_servers import HOST, Cluster, Server

ROOT = pathlib.Path(__file__).resolve().parents[3]
READMES = [ROOT / "bindings" / "python" / "README.md", ROOT / "README.md"]


def blocks(path: pathlib.Path) -> list[tuple[str, str]]:
    """(id, source) of each ```python block, the id naming file and line."""
    found = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i + 1
            j = start
            while lines[j].strip() != "```":
                j += 1
            found.append((f"{path.relative_to(ROOT)}:{start}", "\n".join(lines[start:j]) + "\n"))
            i = j
        i += 1
    return found


ALL = [b for path in READMES for b in blocks(path)]


class Partner(http.server.BaseHTTPRequestHandler):
    """The README's partner API: 200 and a small JSON body to every call."""

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        body = b"[]"
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def partner() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer((HOST, 0), Partner)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://{HOST}:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def addresses(port: int, seeds: list[int], partner: str, shm: pathlib.Path) -> list[tuple[str, Callable[[re.Match[str]], str] | str]]:
    """The rewrites: README address → this test's servers."""
    single = f"redis://{HOST}:{port}/0"
    return [
        # redis-py clients: any host/port/password/TLS arguments → the test server.
        (r"redis\.(asyncio\.)?Redis\([^()]*\)", lambda m: f"redis.{m.group(1) or ''}Redis(host={HOST!r}, port={port})"),
        (r"redis\.cluster\.RedisCluster\([^()]*\)", f"redis.cluster.RedisCluster(host={HOST!r}, port={seeds[0]})"),
        # Connection URLs for the native driver.
        (r"\"redis\+cluster://[^\"]*\"", f"\"redis+cluster://{HOST}:{seeds[0]}\""),
        (r"\[\"redis://[^\]]*\]", repr([f"redis://{HOST}:{p}" for p in seeds]).replace("'", '"')),
        (r"\"rediss?://[^\"]*\"", f"\"{single}\""),
        (r",?\s*ssl_ca_certs=\"[^\"]*\"", ""),
        (r"https://partner\.example", partner),
        (r"/dev/shm/", f"{shm}/"),
    ]


def rewrite(source: str, rules: list[tuple[str, Any]]) -> str:
    for pattern, replacement in rules:
        source = re.sub(pattern, replacement, source)
    return source


def test_every_block_is_found() -> None:
    # The README's examples are many: if the extraction broke, the test
    # below would pass on nothing.
    assert len(ALL) >= 15, [name for name, _ in ALL]


@pytest.mark.parametrize("name,source", ALL, ids=[name for name, _ in ALL])
def test_readme_block_runs(
    name: str, source: str, server: Server, cluster: Cluster, partner: str, tmp_path: pathlib.Path
) -> None:
    code = rewrite(source, addresses(server.port, [n.port for n in cluster.nodes], partner, tmp_path))
    compiled = compile(code, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    # The one name a block may use without defining it: the README's
    # convention, stated in its first block, is `import ratebound as rb`.
    namespace: dict[str, Any] = {"__name__": "readme_block", "rb": importlib.import_module("ratebound")}
    with warnings.catch_warnings():
        # A block may build an outbound adapter on a fail-open limiter to
        # show the warning it gives; warnings are not failures here.
        warnings.simplefilter("ignore")
        result = eval(compiled, namespace)  # noqa: S307 (the README's own code)
        if asyncio.iscoroutine(result):
            asyncio.run(asyncio.wait_for(result, timeout=10))
