"""Type stubs for the extension module (kept in step with src/lib.rs; CI
type-checks tests/typed_usage.py against them with mypy --strict)."""

import os
from typing import Any, Final, Callable, Iterable, Literal, Optional, Protocol, Sequence, TypeVar, Union, final, type_check_only

from typing_extensions import TypedDict, Unpack, disjoint_base

_T = TypeVar("_T")

__version__: str
# The default caps on keys: an in-process table (a middleware policy, @limit), a shared-memory one.
DEFAULT_MAX_KEYS: int
DEFAULT_SHARED_MAX_KEYS: int
__all__ = [
    "ManualClock",
    "Decision",
    "Limiter",
    "Reservation",
    "Waiter",
    "SharedTokenBucket",
    "SharedKeyedLimiter",
    "KeyedLimiter",
    "Gate",
    "Admission",
    "Place",
    "Concurrency",
    "Ask",
    "_Call",
    "_Outbound",
    "_RedisEngine",
    "RedisStats",
    "_RedisCall",
    "_RedisAcquisition",
    "_NativeRedis",
    "_Completions",
    "_is_redis_target",
    "_redis_forked",
    "_misconfigured",
    "_ran_late",
    "_after_evalsha",
    "_merge_fields",
    "_route_option",
    "_GATE_FIELDS",
    "_deadline_exceeded",
    "retry_after_secs",
    "ip_key",
    "client_ip",
    "ratelimit_policy",
    "clock_source",
    "DEFAULT_MAX_KEYS",
    "DEFAULT_SHARED_MAX_KEYS",
    "__version__",
]

_Number = Union[int, float]
_Rate = Union[int, float, str]
_Key = Union[str, bytes, int]

@final
class ManualClock:
    def __new__(cls) -> "ManualClock": ...
    def advance(self, seconds: _Number) -> None: ...
    def advance_ns(self, nanos: int) -> None: ...
    def set(self, seconds: _Number) -> None: ...
    def set_ns(self, nanos: int) -> None: ...
    def now(self) -> float: ...
    def now_ns(self) -> int: ...

@final
class Decision:
    def __bool__(self) -> bool: ...
    allowed: Final[bool]
    limit: Final[int]
    remaining: Final[int]
    retry_after: Final[float]
    reset_after: Final[float]
    retry_after_ns: Final[int]
    reset_after_ns: Final[int]
    @property
    def source(self) -> Optional[str]:
        """Which path of a Redis limiter answered: "redis", "lease",
        "fail_open", "fail_closed" or "local" (the fail policy's local
        share), or "damaged" (Redis answered, but the key held a value no
        script wrote: it was rebuilt as spent and the request refused).
        ``None`` for every local limiter's decision."""

@final
class Waiter:
    def step(self) -> tuple[str, Optional[float]]: ...
    def abandon(self) -> None: ...

@final
class Reservation:
    delay: Final[float]
    delay_ns: Final[int]
    tokens: Final[int]
    def cancel(self) -> None: ...

# The constructors' keyword-only options, written once (every one None by
# default).
@type_check_only
class _AlgorithmOptions(TypedDict, total=False):
    rate: Optional[_Rate]
    burst: Optional[int]
    limit: Optional[int]
    window: Optional[_Number]
    clock: Optional[ManualClock]

@type_check_only
class _LimiterOptions(_AlgorithmOptions, total=False):
    max_delay: Optional[_Number]
    members: Optional[Iterable["Limiter"]]

@type_check_only
class _KeyedOptions(TypedDict, total=False):
    algorithm: Optional[str]
    limit: Optional[int]
    window: Optional[_Number]
    max_keys: Optional[int]

@type_check_only
class _LocalKeyedOptions(_KeyedOptions, total=False):
    overflow: Optional[str]
    clock: Optional[ManualClock]

@type_check_only
class _EngineOptions(_AlgorithmOptions, total=False):
    prefix: Optional[str]
    on_error: Optional[str]
    local_rate: Optional[_Number]
    timeout: Optional[_Number]
    lease: Optional[int]
    lease_ttl: Optional[_Number]
    breaker_threshold: Optional[int]
    breaker_cooldown: Optional[_Number]
    batch: Optional[bool]

# What the local and shared-memory limiters have in common, written once:
# stub-only classes (the runtime classes share no base).
@type_check_only
class _Calls(Protocol):
    def check(self, n: Optional[int] = None) -> Decision: ...
    def try_acquire(self, n: Optional[int] = None) -> bool: ...
    def available(self) -> int: ...
    @property
    def limit(self) -> int: ...
    @property
    def algorithm(self) -> str: ...
    def reserve(self, n: Optional[int] = None, max_wait: Optional[_Number] = None) -> Reservation: ...
    def pause(self, seconds: _Number) -> None: ...
    def resume(self) -> str: ...
    def acquire_blocking(self, n: Optional[int] = None, timeout: Optional[_Number] = None) -> None: ...
    def _waiter(self, n: Optional[int] = None, timeout: Optional[_Number] = None) -> Waiter: ...

@type_check_only
class _KeyedCalls(Protocol):
    @property
    def algorithm(self) -> str: ...
    def check(self, key: _Key, n: Optional[int] = None) -> Decision: ...
    def try_acquire(self, key: _Key, n: Optional[int] = None) -> bool: ...
    def available(self, key: _Key) -> int: ...
    def __len__(self) -> int: ...
    def pause(self, key: _Key, seconds: _Number) -> None: ...
    def resume(self, key: _Key) -> str: ...
    def acquire_blocking(self, key: _Key, n: Optional[int] = None, timeout: Optional[_Number] = None) -> None: ...
    def _waiter(self, key: _Key, n: Optional[int] = None, timeout: Optional[_Number] = None) -> Waiter: ...

@disjoint_base
class Limiter(_Calls):
    def __new__(
        cls: type[_T],
        algorithm: str,
        **options: Unpack[_LimiterOptions],
    ) -> _T: ...
    def peek(self, n: Optional[int] = None) -> Decision: ...
    def set_quota(self, rate: _Rate, burst: Optional[int] = None) -> None: ...
    def _learned(self) -> int: ...
    def _adapt(self, seen: int, next: int) -> bool: ...
    def _learned_rate(self) -> float: ...

@disjoint_base
class KeyedLimiter(_KeyedCalls):
    def __new__(
        cls: type[_T],
        rate: Optional[_Rate] = None,
        burst: Optional[int] = None,
        **options: Unpack[_LocalKeyedOptions],
    ) -> _T: ...
    def remove(self, key: _Key) -> bool: ...
    def reset(self, key: _Key) -> None: ...
    def cleanup(self) -> int: ...
    def cleanup_idle(self, seconds: _Number) -> int: ...
    def _learned(self, key: _Key) -> int: ...
    def _adapt(self, key: _Key, seen: int, next: int) -> bool: ...
    def _learned_rate(self, key: _Key) -> float: ...
    max_keys: Final[int]

# `algorithm` is "token_bucket" by default.
@type_check_only
class _OutboundOptions(TypedDict, total=False):
    algorithm: str
    key: Optional[str]
    n: Optional[int]
    timeout: Optional[_Number]
    retries: Optional[int]
    max_pause: Optional[_Number]
    statuses: Optional[Sequence[int]]
    any_method: Optional[bool]
    backoff: Optional[_Number]
    adaptive: Optional[bool]
    limiter: object

@final
class _Outbound:
    def __new__(
        cls: type[_T],
        **options: Unpack[_OutboundOptions],
    ) -> _T: ...
    @staticmethod
    def sending(n: Optional[int] = None, timeout: Optional[_Number] = None) -> tuple[int, Optional[float]]: ...
    retries: Final[int]
    max_pause: Final[float]
    backoff: Final[float]
    learning: Final[bool]
    @staticmethod
    def learned_word(units: int, changed_ms: int, cut: bool = False) -> int: ...
    def call(
        self,
        method: str,
        scheme: str,
        host: str,
        port: Optional[int],
        key: Optional[str] = None,
        n: Optional[int] = None,
        timeout: Optional[_Number] = None,
        timeout_given: bool = False,
        resendable: bool = True,
    ) -> _Call: ...
    def hook_threw(self) -> bool: ...
    def advise(
        self, method: str, status: int, headers: Sequence[tuple[str, str]], attempt: int, now_unix: float
    ) -> tuple[Optional[float], bool, bool, bool]: ...

@final
class _Call:
    key: Final[str]
    def next(self, now: float) -> tuple[Any, ...]: ...
    def answered(self, status: int, headers: Sequence[tuple[str, str]], now_unix: float) -> None: ...
    def saw(self, seen: int) -> None: ...
    def reserving(self, seen: int) -> None: ...
    def beyond(self, wait: float) -> None: ...
    def adapted(self, replaced: bool) -> None: ...
    def paused(self, shared: Optional[bool], now: float) -> None: ...

@final
class Place:
    def release(self) -> None: ...
    def responded(self) -> None: ...
    def close(self) -> None: ...
    held: Final[bool]

@final
class Admission:
    # Header names and values and the content type: bytes, or str when
    # admitted with wsgi=True.
    status: Final[int]
    headers: Final[list[tuple[Any, Any]]]
    content_type: Final[Any]
    body: Final[Optional[bytes]]
    place: Final[Optional[Place]]
    passed: Final[bool]
    outcome: Final[str]
    refused_by: Final[Optional[str]]
    priority: Final[Optional[str]]
    notice: Final[Optional[str]]

@final
class Concurrency:
    limit: Final[int]
    in_flight: Final[int]
    adaptive: Final[bool]
    baseline_ms: Final[Optional[float]]
    recent_ms: Final[Optional[float]]
    windows: Final[int]

@final
class Ask:
    identity: Final[bytes]
    def close(self) -> None: ...

@final
class Gate:
    def __new__(
        cls,
        options: dict[str, Any],
        policies: Optional[Iterable[tuple[str, Any]]] = None,
        remote: Optional[list[tuple[str, Union[_RedisEngine, SharedKeyedLimiter]]]] = None,
        *,
        key: Optional[Any] = None,
        exempt: Optional[Callable[[Any], Any]] = None,
        critical: Optional[Callable[[Any], Any]] = None,
        priority: Union[None, str, Callable[[Any], Any]] = None,
        on_decision: Optional[Callable[[Any], Any]] = None,
        label: Optional[str] = None,
        clock: Optional[ManualClock] = None,
    ) -> "Gate": ...
    def admit(
        self,
        request: Any,
        peer: Optional[str] = None,
        headers: Optional[Any] = None,
        wsgi: bool = False,
        label: Optional[str] = None,
    ) -> Union[None, Admission, Ask]: ...
    def finish(self, ask: Ask, answers: Sequence[Union[Decision, BaseException, None]]) -> Admission: ...
    def try_enter(self) -> bool: ...
    def leave(self) -> None: ...
    capped: Final[bool]
    adaptive: Final[bool]
    concurrency: Final[Optional[Concurrency]]
    policy_field: Final[str]
    policy_names: Final[tuple[str, ...]]
    remote_names: Final[list[str]]
    def __len__(self) -> int: ...
    def cleanup(self) -> int: ...

@final
class _RedisCall:
    sha: Final[str]
    text: Final[str]
    script: Final[str]
    key: Final[bytes]
    args: Final[list[str]]
    command: Final[bytes]
    eval_command: Final[bytes]
    kind: Final[str]
    n: Final[int]
    def at(self, now_us: int) -> "_RedisCall": ...

@final
class _RedisAcquisition: ...

@final
class RedisStats:
    """What a Redis limiter's decisions came from, counted since it was
    made, and whether its circuit breaker is open now."""

    redis: Final[int]
    lease: Final[int]
    damaged: Final[int]
    fail_open: Final[int]
    fail_closed: Final[int]
    fail_local: Final[int]
    busy: Final[int]
    breaker_open: Final[bool]
    def _asdict(self) -> dict[str, Union[int, bool]]: ...

@final
class _RedisEngine:
    def __new__(
        cls,
        algorithm: Optional[str] = None,
        **options: Unpack[_EngineOptions],
    ) -> "_RedisEngine": ...
    def begin(self, key: _Key, n: Optional[int] = None, scope: Optional[str] = None) -> Union[Decision, _RedisCall]: ...
    def finish(self, call: _RedisCall, reply: Optional[Any] = None, timed_out: bool = False, error: Optional[str] = None, unsent: bool = False) -> Decision: ...
    def drain(self) -> list[_RedisCall]: ...
    def acquire(
        self, key: _Key, n: Optional[int] = None, timeout: Optional[_Number] = None, scope: Optional[str] = None
    ) -> _RedisAcquisition: ...
    def acquire_step(self, a: _RedisAcquisition) -> tuple[str, Any]: ...
    def acquire_reply(self, a: _RedisAcquisition, reply: Optional[Any] = None, timed_out: bool = False, error: Optional[str] = None, unsent: bool = False) -> None: ...
    def acquire_abandon(self, a: _RedisAcquisition) -> Optional[_RedisCall]: ...
    def begin_reserve(
        self, key: _Key, n: Optional[int] = None, max_wait: Optional[_Number] = None, scope: Optional[str] = None
    ) -> Union[tuple[float, str, Optional[int]], _RedisCall]: ...
    def finish_reserve(self, call: _RedisCall, reply: Optional[Any] = None, timed_out: bool = False, error: Optional[str] = None, unsent: bool = False) -> tuple[float, str, Optional[int]]: ...
    def give_back(self, reserve_call: _RedisCall, end_us: int) -> _RedisCall: ...
    def orphaned(self, call: _RedisCall, reply: Optional[Any] = None, timed_out: bool = False, error: Optional[str] = None, unsent: bool = False) -> Optional[_RedisCall]: ...
    def given_back(self, reply: Optional[Any] = None, timed_out: bool = False, error: Optional[str] = None, unsent: bool = False) -> bool: ...
    def begin_pause(self, key: _Key, seconds: _Number, scope: Optional[str] = None) -> _RedisCall: ...
    def pause_local(self, key: _Key, seconds: _Number, scope: Optional[str] = None) -> bool: ...
    def begin_resume(self, key: _Key, scope: Optional[str] = None) -> _RedisCall: ...
    def finish_resume(self, reply: Optional[Any] = None, timed_out: bool = False, error: Optional[str] = None, unsent: bool = False) -> Optional[str]: ...
    def finish_pause(self, reply: Optional[Any] = None, timed_out: bool = False, error: Optional[str] = None, unsent: bool = False) -> Optional[float]: ...
    def finish_pause_news(self, call: _RedisCall, reply: Optional[Any] = None, timed_out: bool = False, error: Optional[str] = None, unsent: bool = False) -> Optional[tuple[float, Optional[bytes]]]: ...
    pause_channel: Final[str]
    def hear(self, message: bytes) -> bool: ...
    breaker_open: Final[bool]
    stats: Final[RedisStats]
    on_error: Final[str]
    timeout: Final[float]
    algorithm: Final[str]
    limit: Final[int]
    prefix: Final[str]
    def leased(self) -> int: ...
    def learned(self, key: _Key, scope: Optional[str] = None) -> int: ...
    def learned_rate(self, key: _Key, scope: Optional[str] = None) -> float: ...
    def begin_adapt(self, key: _Key, seen: int, next: int, scope: Optional[str] = None) -> Optional[_RedisCall]: ...
    def finish_adapt(self, call: _RedisCall, reply: Optional[Any] = None, timed_out: bool = False, error: Optional[str] = None, unsent: bool = False) -> tuple[bool, Optional[bytes]]: ...

# The native Redis connection (a URL in place of a redis-py client).
_Outcome = tuple[Optional[Any], bool, Optional[str], bool]

@final
class _NativeRedis:
    def __new__(
        cls,
        target: Union[str, Sequence[str]],
        engine: _RedisEngine,
        *,
        ssl_ca_certs: Optional[Union[str, "os.PathLike[str]"]] = None,
    ) -> "_NativeRedis": ...
    def check(self, key: _Key, n: Optional[int] = None, scope: Optional[str] = None) -> Decision: ...
    def run(self, call: _RedisCall) -> _Outcome: ...
    def publish(self, channel: str, message: bytes) -> bool: ...
    # A Decision already, or an asyncio future of the running loop.
    def acheck(self, key: _Key, n: Optional[int] = None, scope: Optional[str] = None) -> Any: ...
    def arun(self, call: _RedisCall) -> Any: ...
    def apublish(self, channel: str, message: bytes) -> Any: ...
    def listen(self) -> None: ...
    listening: Final[bool]
    heard_first: Final[bool]
    def wait_listening(self, timeout: float) -> None: ...
    def close(self) -> None: ...
    target: Final[str]
    batch: Final[bool]

@final
class _Completions:
    def __call__(self, *args: Any, **kwargs: Any) -> None: ...

def _is_redis_target(client: object) -> bool: ...
def _misconfigured(error: str) -> Optional[Exception]: ...
def _ran_late(overshoot: float, timeout: float) -> bool: ...
def _after_evalsha(error: str, left: Optional[float]) -> Literal["eval", "timeout", "failed"]: ...
def _redis_forked() -> None: ...
def retry_after_secs(nanos: int) -> int: ...
def ip_key(ip: str, prefix: Optional[int] = None) -> str: ...
def client_ip(
    peer: str,
    headers: Optional[Iterable[tuple[Union[str, bytes], Union[str, bytes]]]] = None,
    trusted_proxies: Union[None, int, str, Iterable[str]] = None,
    client_ip_header: Optional[str] = None,
) -> str: ...
def ratelimit_policy(policies: list[tuple[str, str]]) -> str: ...
def clock_source() -> str: ...
def _merge_fields(
    present: Iterable[tuple[Union[str, bytes], Union[str, bytes]]],
    mine: Iterable[tuple[Union[str, bytes], Union[str, bytes]]],
) -> list[tuple[Any, Any]]: ...
def _route_option(name: str) -> None: ...

_GATE_FIELDS: list[str]
def _deadline_exceeded(wait: float, max_wait: float) -> BaseException: ...

@disjoint_base
class SharedTokenBucket(_Calls):
    def __new__(cls: type[_T], path: Union[str, "os.PathLike[str]"], rate: Optional[_Rate] = None, burst: Optional[int] = None) -> _T: ...
    path: Final["os.PathLike[str]"]
    def _learned(self) -> int: ...
    def _adapt(self, seen: int, next: int) -> bool: ...
    def _learned_rate(self) -> float: ...

@disjoint_base
class SharedKeyedLimiter(_KeyedCalls):
    def __new__(
        cls: type[_T],
        path: Union[str, "os.PathLike[str]"],
        rate: Optional[_Rate] = None,
        burst: Optional[int] = None,
        **options: Unpack[_KeyedOptions],
    ) -> _T: ...
    limit: Final[int]
    slots: Final[int]
    path: Final["os.PathLike[str]"]
    def _learned(self, key: _Key) -> int: ...
    def _adapt(self, key: _Key, seen: int, next: int) -> bool: ...
    def _learned_rate(self, key: _Key) -> float: ...
