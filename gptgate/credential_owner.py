"""Whose key an SDK's or a guarded function's refused request (401/403) carried.

On ``gate.chat`` the gateway sends the backend's own key, so a refusal of it is the backend's
failure (gptgate/credential_failover.py). A request the SDK builds on ``gate.http_client``, or
a guarded function sends on its own client, carries the key *its* client was given: the
backend's own (the usual case: both read ``OPENAI_API_KEY``), or another — a per-tenant SDK
client's. Before, neither path counted a refusal at all: with the backend's key revoked, an
SDK bound to it put 200 of 200 requests on the dead key and its circuit never opened.

A refusal counts against the backend's circuit only when the refused request carried the
backend's own credential (its dialect's key headers with the values the backend's pool sends,
compared in constant time; a key-less backend's own is "none"). A tenant's refused key blames
no backend — one user's wrong key must not open the circuit for every user. A refused request
that cannot be seen (an exception that does not carry it) blames none either.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from contextlib import suppress
from typing import TYPE_CHECKING

from .circuit_cause import remember_failure
from .credential_failover import refused_credentials
from .errors import GateError
from .scrub import is_secret_name

if TYPE_CHECKING:
    from .routing import BackendState

__all__ = ["carries_backends_key", "count_refused_key", "refused_request_headers"]


def _key_headers(state: BackendState, headers: Mapping[str, str]) -> dict[str, bytes]:
    """The values ``headers`` holds under the names the backend's dialect puts its key in."""
    lowered = {name.lower(): value for name, value in headers.items()}
    names = (n.lower() for n in state.pool.dialect.auth_headers("k") if is_secret_name(n))
    return {name: lowered[name].encode() for name in names if name in lowered}


def carries_backends_key(state: BackendState, headers: Mapping[str, str]) -> bool:
    """The request's credential is the one the backend's pool sends (no key for both
    included); the values are only compared, never kept. A backend whose credential is made
    per request (Azure's token provider: no key header) cannot tell: never."""
    if not any(is_secret_name(name) for name in state.pool.dialect.auth_headers("k")):
        return False
    own = _key_headers(state, state.pool.client.headers)
    sent = _key_headers(state, headers)
    return own.keys() == sent.keys() and all(
        hmac.compare_digest(own[name], sent[name]) for name in own
    )


def count_refused_key(
    state: BackendState, error: GateError, headers: Mapping[str, str] | None, now: float
) -> bool:
    """Count a refusal of the backend's own key (``headers``: the refused request's) against
    its circuit, as ``gate.chat`` counts one; returns whether it did."""
    if not refused_credentials(error) or headers is None:
        return False
    if not carries_backends_key(state, headers):
        return False
    remember_failure(state.breaker, error)
    state.breaker.on_failure(now)
    return True


def refused_request_headers(exc: BaseException) -> Mapping[str, str] | None:
    """The headers of the request an SDK's or httpx's status error carries (openai's and
    anthropic's ``APIStatusError.request``, ``HTTPStatusError.request``), None without one."""
    for holder in (exc, getattr(exc, "response", None)):
        request = None
        with suppress(RuntimeError):  # httpx: a response built without its request
            request = getattr(holder, "request", None)
        headers = getattr(request, "headers", None)
        if isinstance(headers, Mapping):
            return headers
    return None
