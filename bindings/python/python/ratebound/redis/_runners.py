"""How the limiters' calls reach Redis: the sync runners (one server, a
cluster, any other client as given: ``_runners_sync``) and the asyncio one
(``_runners_async``), on connections of their own made from the user's
client's settings, each call within one deadline for ``EVALSHA`` and a
possible ``EVAL``; what they share is ``_runners_common``'s. The names the
other modules import are re-exported here."""

from __future__ import annotations

from ._runners_async import _AsyncRunner as _AsyncRunner, _PerLoop as _PerLoop
from ._runners_common import _CLUSTER_OWN as _CLUSTER_OWN, _POOL_OWN as _POOL_OWN, _failed as _failed
from ._runners_common import _nodes as _nodes, _Outcome as _Outcome, _redis as _redis
from ._runners_sync import _AsIs as _AsIs, _Cluster as _Cluster, _Runner as _Runner
from ._runners_sync import _Standalone as _Standalone, _sync_runner as _sync_runner
