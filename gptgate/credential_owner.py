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
that cannot be seen (an exception that does not carry it) blames none either, nor does one
off the endpoints the gateway's calls use (a restricted key lacking ``api.files.read`` is
refused ``/files`` and still serves chat).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from contextlib import suppress
from typing import TYPE_CHECKING

from .circuit_cause import remember_failure
from .credential_failover import refused_credentials
from .errors import GateError
from .operations import operation_of
from .scrub import is_secret_name

if TYPE_CHECKING:
    from .routing import BackendState

__all__ = ["RefusedRequest", "carries_backends_key", "count_refused_key", "refused_request"]

#: a refused request as seen: its headers and its URL's path
RefusedRequest = tuple[Mapping[str, str], str]


#: where an SDK may carry a backend's key, whatever header its dialect sends it in: the
#: ``anthropic`` package (2.x) sends ``api_key`` as ``Authorization: Bearer``, not
#: ``x-api-key`` — compared by header name, the backend's own key refused through it never
#: counted (a revoked Anthropic key took every SDK request, its circuit closed)
_CARRIERS = frozenset({"authorization", "x-api-key", "api-key"})


def _credentials(names: frozenset[str], headers: Mapping[str, str]) -> set[bytes]:
    """The credential values ``headers`` holds under ``names``, a ``Bearer`` prefix off."""
    found = set()
    for name, value in headers.items():
        if name.lower() in names:
            token = value.strip()
            if token[:7].lower() == "bearer ":
                token = token[7:].strip()
            if token:
                found.add(token.encode())
    return found


def carries_backends_key(state: BackendState, headers: Mapping[str, str]) -> bool:
    """The request's credential is the one the backend's pool sends, under whichever header
    the SDK put it (no key for both included); the values are only compared, never kept. A
    backend whose credential is made per request (Azure's token provider: no key header)
    cannot tell: never."""
    dialect = {n.lower() for n in state.pool.dialect.auth_headers("k") if is_secret_name(n)}
    if not dialect:
        return False
    own = _credentials(frozenset(dialect), state.pool.client.headers)
    sent = _credentials(_CARRIERS | dialect, headers)
    if len(own) != len(sent):
        return False
    return all(any(hmac.compare_digest(key, other) for other in own) for key in sent)


def count_refused_key(
    state: BackendState, error: GateError, refused: RefusedRequest | None, now: float
) -> bool:
    """Count a refusal of the backend's own key (``refused``: the request's headers and
    path) against its circuit, as ``gate.chat`` counts one; returns whether it did. Only on an
    endpoint the backend serves the gateway's calls on: a restricted key refused ``/files``
    (a scope it lacks) may still serve chat."""
    if not refused_credentials(error) or refused is None:
        return False
    headers, path = refused
    if operation_of(path) is None:
        return False
    if not carries_backends_key(state, headers):
        return False
    remember_failure(state.breaker, error)
    state.breaker.on_failure(now)
    return True


def refused_request(exc: BaseException) -> RefusedRequest | None:
    """The headers and path of the request an SDK's or httpx's status error carries (openai's
    and anthropic's ``APIStatusError.request``, ``HTTPStatusError.request``), None without."""
    for holder in (exc, getattr(exc, "response", None)):
        request = None
        with suppress(RuntimeError):  # httpx: a response built without its request
            request = getattr(holder, "request", None)
        headers = getattr(request, "headers", None)
        path = getattr(getattr(request, "url", None), "path", None)
        if isinstance(headers, Mapping) and isinstance(path, str):
            return headers, path
    return None
