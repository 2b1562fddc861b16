"""How a failed attempt is reported to its backend's limit — one rule for every path (calls,
``@gate.guard``, ``gate.http_client``).

* **congestion** (429, 408, overload 503/529, a timeout): a *dropped* sample, the limit's
  loss signal;
* **a server failure** (another 5xx, a stream cut mid-answer): dropped, but marked as no sign
  of congestion by itself (``congestion=False``) — it lowers goodput, so a failure rate that
  grows with the load moves the knee, without one failure cutting the limit;
* anything else (a bad request, a refused key): *ignored* — it says nothing about the load.
"""

from __future__ import annotations

from .errors import (
    BackendError,
    GateError,
    RateLimitedError,
    RequestTimeout,
    StreamInterruptedError,
)
from .limits import Permit

__all__ = ["CONGESTION_STATUSES", "is_congestion", "is_server_failure", "report_failure"]

#: HTTP statuses that say the backend is overloaded (or timed the request out)
CONGESTION_STATUSES = frozenset({408, 429, 503, 529})


def is_congestion(error: BaseException) -> bool:
    if isinstance(error, (RateLimitedError, RequestTimeout)):
        return True
    return isinstance(error, BackendError) and error.status in CONGESTION_STATUSES


def is_server_failure(error: BaseException) -> bool:
    if isinstance(error, StreamInterruptedError):
        return True
    return isinstance(error, BackendError) and error.status is not None and error.status >= 500


def report_failure(permit: Permit, error: GateError, latency_s: float) -> None:
    """End ``permit`` for a failed attempt (a no-op if it has ended already)."""
    if is_congestion(error):
        permit.dropped(latency_s)
    elif is_server_failure(error):
        permit.dropped(latency_s, congestion=False)
    else:
        permit.ignore()


def report_status(permit: Permit, status: int, latency_s: float) -> None:
    """End ``permit`` for an HTTP error response seen only as its status (``http_client``)."""
    if status in CONGESTION_STATUSES:
        permit.dropped(latency_s)
    elif status >= 500:
        permit.dropped(latency_s, congestion=False)
    else:
        permit.ignore()
