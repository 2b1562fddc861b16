"""How a failed attempt is reported to its backend's limit — one rule for every path (calls,
``@gate.guard``, ``gate.http_client``).

* **congestion** (429, 408, overload 503/529, a timeout): a *dropped* sample, the limit's
  loss signal; a 429 is marked ``rate_limited`` (it says "wait" more than "fewer at once");
* **a server failure** (another 5xx, a stream cut mid-answer): dropped, but marked as no sign
  of congestion by itself (``congestion=False``) — it lowers goodput, so a failure rate that
  grows with the load moves the knee, without one failure cutting the limit;
* anything else (a bad request, a refused key, the caller's own deadline passing or cutting
  the attempt — ``RequestTimeout(deadline=True)``): *ignored* — it says nothing about the load.

A request *we* hung up on (a timeout after the send, the caller's deadline cutting it) is
*abandoned* as well: the backend keeps working on it until it notices, so its slot stays
taken for the backend's ``abandon_grace_s`` (``Permit.abandon``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from .circuit_cause import remember_failure
from .errors import (
    BackendError,
    GateError,
    RateLimitedError,
    RequestTimeout,
    StreamInterruptedError,
)
from .limits import Permit
from .shed import is_shed
from .shed_pause import full_queue_pause_s
from .stream_cut import by_caller, circuit_failure, what_cut

if TYPE_CHECKING:
    from .routing import BackendState

__all__ = [
    "CONGESTION_STATUSES",
    "count_failure",
    "report_failure",
    "report_status",
    "we_hung_up",
]

#: HTTP statuses that say the backend is overloaded (or timed the request out)
CONGESTION_STATUSES = frozenset({408, 429, 503, 529})

_Kind = Literal["rate limited", "congestion", "server failure"] | None


def _status_kind(status: int | None) -> _Kind:
    if status == 429:
        return "rate limited"
    if status in CONGESTION_STATUSES:
        return "congestion"
    if status is not None and status >= 500:
        return "server failure"
    return None


def _error_kind(error: GateError) -> _Kind:
    if by_caller(error):  # the caller's side: no sign of the backend's load
        return None
    if isinstance(error, RateLimitedError):
        return "rate limited"
    if isinstance(error, RequestTimeout):
        return "congestion"
    if isinstance(error, StreamInterruptedError):
        return "server failure"
    return _status_kind(error.status) if isinstance(error, BackendError) else None


def _end(permit: Permit, kind: _Kind, latency_s: float, *, abandoned: bool = False) -> None:
    if kind is None:
        permit.abandon() if abandoned else permit.ignore()
    else:
        permit.dropped(
            latency_s,
            congestion=kind != "server failure",
            rate_limited=kind == "rate limited",
            abandoned=abandoned,
        )


def report_failure(permit: Permit, error: GateError, latency_s: float) -> None:
    """End ``permit`` for a failed attempt (a no-op if it has ended already)."""
    _end(permit, _error_kind(error), latency_s, abandoned=we_hung_up(error))


def we_hung_up(error: BaseException) -> bool:
    """The attempt reached the backend and we cut it before its answer ended (a timeout, the
    caller's deadline): the backend may still be running it."""
    error = what_cut(error)
    return (
        isinstance(error, RequestTimeout)
        and not error.unsent
        and error.status is None  # a 408 is the server's own answer
    )


def report_status(permit: Permit, status: int, latency_s: float) -> None:
    """End ``permit`` for an HTTP error response seen only as its status (``http_client``)."""
    _end(permit, _status_kind(status), latency_s)


def count_failure(state: BackendState, error: GateError, now: float) -> None:
    """Count a failed attempt on its backend's ``stats()`` and health — one rule for every
    path: a refusal's retry-after (a 429's, a 503/529's: ``gptgate.shed``) pauses the whole
    backend once (its pacer; a 429's, with ``shared=``, in every process of the fleet), a
    server failure, a timeout or a stream the server cut counts towards opening its
    circuit (gptgate/stream_cut.py)."""
    state.failures += 1
    shed = is_shed(error)
    if isinstance(error, RateLimitedError):
        state.rate_limited += 1
        if error.retry_after:  # short windows (Azure): the held calls go a retry-after apart
            spacing = error.retry_after if state.pool.dialect.spaced_after_429 else None
            state.pacer.pause_until(now + error.retry_after, spacing)
            # shared=: every process pauses — whichever path saw it (gate.chat, an SDK on
            # gate.http_client, a guard); only gate.chat's used to tell the fleet
            shared_pause = getattr(state.limiter.admission, "pause", None)
            if shared_pause is not None:
                shared_pause(error.retry_after)
    elif shed:  # a 503/529 "full, come back then" pauses the backend as a 429 does, until
        assert error.retry_after is not None  # a place is expected to free (shed_pause.py)
        pause = full_queue_pause_s(error.retry_after, state.latency.ewma, state.limiter.in_flight)
        state.pacer.pause_until(now + pause, rate_limited=False)
    elif isinstance(what_cut(error), RequestTimeout):  # a stream's idle timeout too
        state.timeouts += 1
    # a busy server's refusal is no sign the backend is down; a stream cut mid-answer counts
    # as what cut it, the server or the network — never its caller (gptgate/stream_cut.py)
    counted = circuit_failure(error)
    if counted is not None:
        remember_failure(state.breaker, counted)
        state.breaker.on_failure(now)
