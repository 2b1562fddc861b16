"""A backend that refuses its credentials (401/403) fails over, and counts against its health.
So does one whose account is out of funds or quota (``OutOfFundsError``: a 402, OpenAI's
``insufficient_quota``, Anthropic's "credit balance is too low"), for the same reason.

A revoked or rotated key is the backend's failure, not the call's: every call sent there
will be refused the same way. It was a ``BadRequestError`` like a malformed call — never
moved, never counted against the backend — so with a healthy fallback configured, 200 of
200 calls failed with the primary's 401 and the fallback got none (the router kept choosing
the primary). Now such a refusal moves the call to an eligible backend it has not tried, at
no back-off and no retry cost (as a context-window refusal does: context_failover.py), and
counts towards the backend's circuit, so later calls stop paying a round trip to a dead
key; while the circuit is open the error names the refusal (circuit_cause.py).

A call that carries its own credential (``extra_headers`` naming a key or token: a tenant's
key) was refused for *its* key, which no other backend would accept either: it is raised as
is and blames no backend. A call pinned to its backend (``backend=``) gets the refusal.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import TYPE_CHECKING

from .circuit_cause import remember_failure
from .errors import BadRequestError, GateError, OutOfFundsError, RequestTooLargeError
from .scrub import is_secret_name

if TYPE_CHECKING:
    from .routing import BackendState, Router, RouteRequest

__all__ = ["credentials_refused_here", "refused_credentials"]

#: "who are you" and "not you": both say the key, not the request
_STATUSES = frozenset({401, 403})


def refused_credentials(error: GateError) -> bool:
    """The server refused the backend's credentials (a 401 or 403) or its account (out of
    funds or quota, whatever the status: wire/out_of_funds.py)."""
    if isinstance(error, OutOfFundsError):
        return True
    return (
        isinstance(error, BadRequestError)
        and not isinstance(error, RequestTooLargeError)
        and error.status in _STATUSES
    )


def _own_credential(headers: Mapping[str, str] | None) -> bool:
    return bool(headers) and any(is_secret_name(name) for name in headers or ())


def credentials_refused_here(
    error: GateError,
    backend: BackendState,
    headers: Mapping[str, str] | None,
    router: Router,
    route: RouteRequest,
    tried: Set[str],
    now: float,
) -> bool:
    """Count a refusal of ``backend``'s credentials against its circuit, and make ``error`` a
    retry elsewhere when an eligible backend the call has not ``tried`` remains; returns
    whether it moved the call."""
    if not refused_credentials(error) or _own_credential(headers):
        return False
    remember_failure(backend.breaker, error)
    backend.breaker.on_failure(now)
    if not router.has_alternative(route, frozenset(tried) | {backend.name}):
        return False
    error.retryable = error.moved = True  # outside max_attempts too (context_failover.py)
    return True
