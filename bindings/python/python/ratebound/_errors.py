"""The exceptions ratebound raises. Every one has ``code``: the core's stable
error code, the same in Rust, Python and Node."""

from __future__ import annotations

from typing import Optional

__all__ = [
    "RateboundError",
    "QuotaError",
    "InsufficientCapacity",
    "RateLimitExceeded",
    "TooManyKeys",
    "Unsupported",
    "ConfigError",
    "MissingValue",
    "SharedStateError",
    "SharedStatePermissionError",
    "StoreMisconfigured",
    "StoreUnavailable",
]


class RateboundError(Exception):
    """Base class of ratebound's errors."""

    code: str

    def __init__(self, message: str = "", code: str = "error") -> None:
        super().__init__(message)
        self.code = code


class QuotaError(RateboundError, ValueError):
    """A rate, burst, limit, window or other number that can never work; the
    message names the value."""


class InsufficientCapacity(RateboundError, ValueError):
    """More tokens asked for at once than the limiter can ever hold."""


class RateLimitExceeded(RateboundError):
    """Raised by ``acquire`` when its timeout cannot be met (at once, taking
    nothing), and by ``@limit``-decorated functions when refused.
    ``retry_after`` is the wait in seconds after which it would succeed;
    ``max_wait`` the longest wait the caller accepted (``None`` where it is
    not told: a decorated function refused)."""

    retry_after: float
    max_wait: Optional[float]

    def __init__(
        self,
        message: str = "rate limit exceeded",
        code: str = "deadline_exceeded",
        retry_after: float = 0.0,
        max_wait: Optional[float] = None,
    ) -> None:
        super().__init__(message, code)
        self.retry_after = retry_after
        self.max_wait = max_wait

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (str(self), self.code, self.retry_after, self.max_wait))


class TooManyKeys(RateboundError):
    """A keyed limiter at its ``max_keys`` cap with ``overflow="reject"`` was
    asked about a new key."""


class Unsupported(RateboundError, TypeError):
    """The algorithm cannot do this (e.g. ``reserve`` on a window)."""


class ConfigError(RateboundError, ValueError, TypeError):
    """A middleware option that cannot work: a value of the wrong kind (a
    string where a number goes), an unknown name, or one option that needs
    another (a ``client_ip_header`` without ``trusted_proxies``). Both a
    ``ValueError`` and a ``TypeError``, so that either ``except`` catches it."""


class MissingValue(RateboundError, TypeError):
    """``None`` where a value is required (e.g. ``TokenBucket(rate=None)``):
    a ``TypeError``, as Python's own functions raise for a missing argument."""


class SharedStateError(RateboundError, OSError):
    """A shared limit's file could not be used: its directory is missing, it
    holds another limit (``code == "shm_mismatch"``), it is not a ratebound
    table or is truncated (``"shm_corrupt"``), or it was made before the
    host's last boot (``"shm_stale_boot"``). The message names the file."""


class SharedStatePermissionError(SharedStateError, PermissionError):
    """A shared limit's file belongs to another user, or other users could
    read or change it (``code == "shm_permissions"``)."""


class StoreMisconfigured(RateboundError, ConnectionError):
    """The store (Redis) refused this client for good: a wrong password or
    an unknown user, a user without the permission, a database that does
    not exist, TLS to a server that speaks none, a Unix socket that is not
    there, a host name that does not resolve (``code ==
    "store_misconfigured"``). Raised by the call that met it, never answered
    by the fail policy, which is for a store unreachable at the moment. The
    message names the cause, never the password."""


class StoreUnavailable(RateLimitExceeded, ConnectionError):
    """A wait refused because the store cannot be reached and the fail
    policy is ``"closed"`` (``code == "store_unavailable"``); the message
    says why. A :class:`RateLimitExceeded`, as a refused wait always was;
    ``retry_after`` is the breaker's cool-down."""

    def __init__(self, message: str = "the store is unavailable", code: str = "store_unavailable", retry_after: float = 0.0) -> None:
        super().__init__(message, code, retry_after)
