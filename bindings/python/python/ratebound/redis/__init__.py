"""Global rate limits in Redis, shared by every instance of a service.

Fifty pods with a local ``TokenBucket(10, 20)`` each send up to fifty times
the limit; a limit they all share has to live in one place: Redis (or Redis
Cluster). Each check is one ``EVALSHA`` of a Lua script that reads Redis'
own clock; ``NOSCRIPT`` (a restart, a failover, ``SCRIPT FLUSH``, another
cluster node) loads it with ``EVAL`` within the same call. The Rust engine
(``ratebound_redis``, the one the Rust and Node drivers use) builds every
call and makes every decision; this module only runs the calls with
redis-py (``pip install redis``), which it imports when a limiter is made.

>>> import redis
>>> import ratebound as rb
>>> client = redis.Redis(host="127.0.0.1", port=1)    # nothing listens there
>>> limiter = rb.redis.TokenBucket(client, rate=10, burst=20)
>>> d = limiter.check("partner-api")
>>> d.allowed, d.source                              # the fail policy answered
(True, 'fail_open')
>>> limiter.close()
0

Sync limiters (:class:`TokenBucket`, :class:`FixedWindow`,
:class:`SlidingWindow`) take a ``redis.Redis`` or a
``redis.cluster.RedisCluster``; the asyncio ones (:class:`AsyncTokenBucket`,
:class:`AsyncFixedWindow`, :class:`AsyncSlidingWindow`) a
``redis.asyncio.Redis`` or a ``redis.asyncio.cluster.RedisCluster``.

**A URL in place of a client.** Every limiter also takes a URL —
``redis://[user:password@]host[:port][/db]``, ``rediss://`` (TLS, with the
system's roots or ``ssl_ca_certs=`` a PEM file), ``unix:///path``, and a
cluster as ``redis+cluster://host:port`` or a list of its nodes' URLs — and
then connects by itself, with the Rust ``redis`` crate inside the extension
(redis-py is not needed): one multiplexed connection per target, shared by
the limiters that name it, on a small runtime of the extension's own; a
sync call releases the GIL while Redis answers, an asyncio call's future is
completed from that runtime (no thread per call). While calls are in flight
on the connection, new ones go out together as one batch script run (per
hash slot in a cluster), each decided exactly as a separate call would be;
``batch=False`` sends one run per call. The engine, its deadline and its
fail policy are the same as with a client. A forked child makes its own
connection at its first call. A bad URL is a
:class:`~ratebound.ConfigError` naming it (its password hidden).

>>> lim = rb.redis.TokenBucket("redis://127.0.0.1:1/0", rate=10, burst=20)   # nothing listens there
>>> lim.check("partner-api").source
'fail_open'
>>> lim.close()
0

**Deadlines.** Every call has one deadline, ``timeout`` (default 0.05 s),
for ``EVALSHA`` and a possible ``EVAL`` together. A redis-py client built
with the defaults retries with backoff and waits up to 5 s per socket
operation, so the limiter does not send its calls through your client: it
builds its own connections from your client's settings (host, port, db,
credentials, TLS, ``decode_responses`` ...: ``connection_pool.connection_kwargs``,
or a cluster client's node settings and startup nodes) with
``socket_connect_timeout`` and ``socket_timeout`` set to the deadline, no
retries (``Retry(NoBackoff(), 0)``) and a pool of your client's
``max_connections`` (redis-py's default 100): calls beyond it wait for a
connection within their deadline, and one that gets none in time is
refused with ``source="busy"`` (never the fail policy's answer, never
counted by the breaker). Your client is never used or closed; call
:meth:`TokenBucket.close` (``aclose`` for asyncio) to close the limiter's
connections.

- asyncio: the whole call runs under ``asyncio.wait_for(..., timeout)``.
- sync, ``redis.Redis``: each reply is read with the time left until the
  deadline; a new connection's connect and handshake are each bounded by
  ``timeout`` (so a call that has to connect to a host that accepts but
  does not answer can take up to twice the deadline).
- sync, ``redis.cluster.RedisCluster``: each socket operation is bounded by
  ``timeout``; after a connection error redis-py refreshes the cluster's
  topology within the failing call, each node it asks bounded the same way.
  The limiter's cluster client is made with the limiter (redis-py reads the
  cluster's topology then, each node bounded by ``timeout``), or, if the
  cluster cannot be reached then, by the first call that reaches it.
- any other client (e.g. one over a Sentinel pool) is used as given through
  ``client.evalsha``: asyncio still bounds it with ``wait_for``; a sync call
  is then bounded only by that client's own timeouts, and a reply that
  comes back past the deadline counts as a timeout (the fail policy
  answers; a late reservation's tokens are given back).

**A call that timed out may still have run in Redis**: its tokens may be
spent although the fail policy answered.

**Fail policy** (``on_error``): no exception from redis-py reaches the
caller for a Redis that is down, slow or failing — a connection error, a
timeout, an error reply are outcomes, and the policy answers: ``"open"`` admits (``source="fail_open"``),
``"closed"`` refuses with ``retry_after`` = the breaker's cool-down
(``"fail_closed"``), ``"local"`` asks a local token bucket per key at
``local_rate`` per second (``"local"``; a share of the global rate, e.g.
rate / instances). After ``breaker_threshold`` (3) failures in a row the
circuit breaker opens: for ``breaker_cooldown`` (1 s) the policy answers at
once without calling Redis, then one call probes it, and a success closes it
— recovery needs no new client.

**A typo is an error.** A wrong password or user, a missing permission, a
database that does not exist, TLS to a server without it, a Unix socket that
is not there, a host name that does not resolve: the call that meets it
raises :class:`~ratebound.StoreMisconfigured` naming the cause (never the
password), with a URL or a redis-py client alike; the fail policy is for a
Redis unreachable at the moment.

**Never silent.** ``limiter.stats`` (a :class:`RedisStats`) counts what the
decisions came from and says whether the breaker is open; the
``ratebound.redis`` logger warns once when the breaker opens, once when it
closes, and once per episode of ``busy`` refusals.

**Leasing** (``lease=k``): one round trip takes up to ``k`` tokens and this
instance spends the rest locally for up to ``lease_ttl`` (1 s) seconds
(``source="lease"``). Leased tokens are counted in Redis, so the global
bound holds; the cost is that up to ``k - 1`` tokens per instance can sit
unused while another instance is refused, and that tokens taken together
can be spent in a burst. ``close()`` gives unspent leased tokens back.

**Pauses reach the waiters of every instance.** ``pause`` moves every
reservation in Redis past the pause and, when it moved anything, publishes
the news on the prefix's channel (``rb:pause``; a second command within the
deadline). A token bucket limiter listens on that channel from its first
wait on (a thread for sync limiters, a task for asyncio ones, on a
connection of its own made from the same settings; in a cluster, to one
node: a ``PUBLISH`` reaches every node); the first wait waits (at most the
deadline) for the subscription before it reserves. A waiter asleep on a
reservation that a pause moved wakes at its old time and sleeps on until
its new one: no call is added to any acquisition. A waiter whose limiter
did not hear the news (the subscription was down, or the client cannot
subscribe: one used as given without ``pubsub()``) wakes at its old time
and goes ahead inside the pause; its next call finds the pause in Redis.
``close()`` / ``aclose()`` stops listening.

Keys are ``str`` (its UTF-8 bytes), ``bytes`` or ``int`` (its decimal
digits): ``1``, ``"1"`` and ``b"1"`` are the same Redis key. In Redis a key
is ``prefix`` (default ``"rb:"``), the algorithm's tag (``tb``, ``fw``,
``sw``), ``:`` and the key — ``rb:tb:alice`` — so a token bucket and a
window never read each other's state, while a limiter whose numbers change
(a redeploy) keeps its keys. A middleware checks each Redis policy in its own
scope, ``rb:tb@<policy name>:<identity>``: two policies never share a key.

**What a key holds.** A state beyond the limit (the burst or limit was
lowered) is refused with the exact wait, never a failure. A value no script
wrote (another type, text that is not the state) is rebuilt as spent and
refused with ``source="damaged"``, healing within one burst period or
window; neither reaches the fail policy or the circuit breaker. Errors the core raises for a request that
can never work: ``n`` above the burst or limit
(:class:`~ratebound.InsufficientCapacity`). ``n = 0`` is a query, as for every
local limiter: admitted, nothing taken, the key's state reported.
"""

from __future__ import annotations

# The package's modules, one concern each: _options (the keyword options and
# the arguments' types), _runners (how a call reaches Redis, sync and
# asyncio: the deadlines, the EVAL the engine asks for after a NOSCRIPT),
# _listeners (the pause listeners), _base (what the sync and asyncio limiters
# share without waiting: the engine's steps, the constructors,
# RedisReservation), _sync and _async (the limiters). Their private names
# stay reachable here.
from .._ratebound import Decision as Decision
from .._ratebound import RedisStats
from ._async import AsyncFixedWindow, AsyncSlidingWindow, AsyncTokenBucket, _AsyncLimiter as _AsyncLimiter
from ._base import RedisReservation
from ._listeners import _AsyncListener as _AsyncListener, _AsyncSubscribe as _AsyncSubscribe, _Listener as _Listener
from ._listeners import _Subscribe as _Subscribe, _listener_kwargs as _listener_kwargs, _news as _news
from ._options import Key as Key, Number as Number, Options as Options, Rate as Rate
from ._options import SlidingOptions as SlidingOptions
from ._runners import _CLUSTER_OWN as _CLUSTER_OWN, _POOL_OWN as _POOL_OWN, _AsIs as _AsIs
from ._runners import _AsyncRunner as _AsyncRunner, _Cluster as _Cluster, _failed as _failed, _nodes as _nodes
from ._runners import _Outcome as _Outcome, _redis as _redis, _Runner as _Runner, _Standalone as _Standalone
from ._runners import _sync_runner as _sync_runner
from ._sync import FixedWindow, SlidingWindow, TokenBucket, _Limiter as _Limiter

__all__ = [
    "RedisReservation",
    "RedisStats",
    "AsyncFixedWindow",
    "AsyncSlidingWindow",
    "AsyncTokenBucket",
    "FixedWindow",
    "SlidingWindow",
    "TokenBucket",
]

