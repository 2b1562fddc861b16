"""``gate.http_client("a", fallback=["b", ...])``: an SDK's request the primary cannot serve
goes to the next backend that can, as ``gate.chat``'s call would.

An SDK request carries its own URL, key and model, so the transport behind
``gate.http_client("a")`` could only send it to ``a``: a dead server, a revoked key or an
empty account failed every request (and, once the circuit opened, refused them unsent with a
503 naming the cause) while ``gate.chat`` failed over. With ``fallback=``, the request is sent
again — rewritten for the fallback backend (gptgate/sdk_reroute.py): its URL, its key in its
header, its model — when the primary is *unavailable*, and only then:

- its circuit is open (the request goes to the fallback at once, unsent to the primary);
- its server refused the connection or did not accept it in time (nothing was sent);
- it refused the backend's own key (401/403) or its account is out of funds or quota;
- its server refused the prompt as too long for its context window (the 400 of
  gptgate/context_failover.py: it can never run there; a fallback with a larger window may).

Not for another refusal of the request itself (a 400, a 404 for a model: the SDK gets it, as
it would from any server), a 5xx or a timeout after the send (the server may have run it; the
circuit opens on those, and later requests then fail over), and never after a response's
first byte: a stream cut mid-answer is the SDK's error, not sent again. Each fallback is met
in order, through its own limiter, circuit, ledger and spans (the answer is booked where it
was served); when every one is unavailable too, the SDK gets the primary's own answer.

What is moved: a POST to an API both serve (chat, completions, embeddings, responses; the
Messages API between Anthropic backends) with a JSON body that does not point into the
primary's account (``previous_response_id``), carrying the primary's own key (or the primary
has none). A request carrying another key — a tenant's — is that tenant's: at the fallback it
would be billed to the fallback's account, so it meets the primary's fate as before.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx2

from .config import Backend
from .context_failover import refused_for_length
from .credential_failover import refused_credentials
from .credential_owner import carries_backends_key
from .error_body import CLASSIFIED
from .errors import BadRequestError, GateError
from .failover_trail import TRAIL, FailoverTrail
from .guard import _GUARD_PERMIT, REFUSED_HEADER
from .providers import PROVIDERS
from .scrub import is_secret_name
from .sdk_circuit import FALLS_TO
from .sdk_placed import PlacedAnswers, placed_answers, sniff_id
from .sdk_reads import stored
from .sdk_reroute import FAMILIES, api_tail, rerouted
from .warn_once import warn_once

if TYPE_CHECKING:
    from .guard import GuardedGateway
    from .routing import BackendState

__all__ = ["FAILED_OVER", "FailoverTransport", "Fallbacks", "check_fallbacks"]

#: the request extension marking a fallback's copy sent after the primary failed it: a retry
#: on the fallback, counted in its ``stats().retries`` as ``gate.chat``'s failover is (one
#: moved past the primary's open circuit, never sent there, is the fallback's first try)
FAILED_OVER = "gptgate_failed_over"

_log = logging.getLogger("gptgate")

#: the failures the request was not sent in: nothing reached the server
_UNSENT = (httpx2.ConnectError, httpx2.ConnectTimeout)


@dataclass(frozen=True)
class Fallbacks:
    """The checked ``fallback=`` and ``fallback_models=`` of one ``http_client``."""

    names: tuple[str, ...]
    #: per fallback backend: the request's model → the model sent there
    models: Mapping[str, Mapping[str, str]]


def _family(backend: Backend) -> str:
    return FAMILIES.get(PROVIDERS[backend.provider].dialect, PROVIDERS[backend.provider].dialect)


def check_fallbacks(
    backends: Sequence[Backend], primary: str, fallback: Sequence[str] | None,
    fallback_models: Mapping[str, Mapping[str, str]] | None,
) -> Fallbacks | None:
    """The fallbacks, checked as ``http_client`` is called (a ``BadRequestError`` naming the
    mistake: an unknown or repeated name, the primary itself, another wire's backend, a
    model mapping for a backend not in ``fallback``); None without any."""
    if isinstance(fallback, str) or not isinstance(fallback, (Sequence, type(None))):
        raise BadRequestError(
            f"fallback must be a list of backend names, got {type(fallback).__name__}"
            + (f" (write fallback=[{fallback!r}])" if isinstance(fallback, str) else "")
        )
    names = tuple(fallback or ())
    by_name = {b.name: b for b in backends}
    own = by_name[primary]
    for name in names:
        if not isinstance(name, str) or name not in by_name:
            known = ", ".join(by_name)
            raise BadRequestError(f"fallback: unknown backend {name!r}; known: {known}")
        if name == primary:
            raise BadRequestError(f"fallback: {name!r} is the primary backend itself")
        if _family(by_name[name]) != _family(own):
            raise BadRequestError(
                f"fallback {name!r} speaks the {_family(by_name[name])} wire "
                f"(provider {by_name[name].provider!r}) and {primary!r} the {_family(own)} "
                f"wire (provider {own.provider!r}): an SDK request built for one cannot be "
                f"sent to the other; name fallbacks of the same shape"
            )
    if len(set(names)) != len(names):
        raise BadRequestError(f"fallback names a backend twice: {list(names)}")
    models = dict(fallback_models or {})
    for name, mapping in models.items():
        if name not in names:
            raise BadRequestError(
                f"fallback_models names {name!r}, which is not in fallback={list(names)}"
            )
        if not isinstance(mapping, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
        ):
            raise BadRequestError(
                f"fallback_models[{name!r}] must map the request's model to the model sent "
                f"to {name!r} (str → str)"
            )
    return Fallbacks(names, models) if names else None


def request_is_create(path: str) -> bool:
    """A POST creating an answer the server may store (not a read of one)."""
    return path.rstrip("/").endswith(("/responses", "/chat/completions"))


def _own_request(state: BackendState, headers: Mapping[str, str]) -> bool:
    """The request carries the primary's own key, or the primary has no static key."""
    names = {n.lower() for n in state.pool.dialect.auth_headers("k") if is_secret_name(n)}
    if not any(n in state.pool.client.headers for n in names):
        return True
    return carries_backends_key(state, headers)


def _unavailable(
    state: BackendState, sent: httpx2.Request, response: httpx2.Response
) -> str | None:
    """Why ``response`` says the backend cannot serve (None: it is the answer)."""
    if response.headers.get(REFUSED_HEADER) == "circuit-open":
        return "circuit open"
    error = response.extensions.get(CLASSIFIED)
    if not isinstance(error, GateError):
        return None
    if refused_credentials(error) and carries_backends_key(state, sent.headers):
        return f"its key or account refused [{response.status_code}]"
    if refused_for_length(error):  # never a mark against its health (context_failover.py)
        return f"the prompt is too long for its context window [{response.status_code}]"
    return None


class FailoverTransport(httpx2.AsyncBaseTransport):
    """The transport behind ``gate.http_client(primary, fallback=[...])``: the primary's
    and each fallback's own SDK transport (gptgate/sdk_client.py), tried in order. It holds
    backend names only: no key, URL or request outlives a request here."""

    def __init__(
        self, gate: GuardedGateway, primary: str, fallbacks: Fallbacks,
        transports: Mapping[str, httpx2.AsyncBaseTransport],
    ) -> None:
        self._gate = gate
        self._order = (primary, *fallbacks.names)
        self._models = fallbacks.models
        self._transports = dict(transports)

    def __repr__(self) -> str:
        return f"FailoverTransport({' -> '.join(self._order)})"

    def _movable(
        self, state: BackendState, request: httpx2.Request
    ) -> tuple[bytes, dict[str, Any]] | None:
        """The request's API tail and parsed body when it may go elsewhere, else None."""
        if request.method != "POST":
            return None
        tail = api_tail(_family(state.backend), request.url.path)
        if tail is None or not _own_request(state, request.headers):
            return None
        try:
            body = json.loads(request.content)
        except (httpx2.RequestNotRead, ValueError):  # a streamed upload; not JSON
            return None
        if not isinstance(body, dict) or body.get("previous_response_id"):
            return None
        return tail, body

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        gate = self._gate
        runner = gate.runner  # GatewayClosedError before anything else
        primary = gate.backend_state(self._order[0])
        # never moved to a fallback either; its call failed (a guard counts its own)
        runner.sdk_calls.accepted(primary, request, counted=_GUARD_PERMIT.get() is None)
        first = self._transports[self._order[0]]
        placed = placed_answers(gate)
        there = await self._to_holder(primary, placed, request)
        if there is not None:  # a stored answer a fallback created: read where it lives
            return there
        movable = self._movable(primary, request)
        if movable is None:
            return await first.handle_async_request(request)
        tail, body = movable
        held = _GUARD_PERMIT.get()
        if held is not None:  # a guard pinned to the primary follows this client's order
            held.failover = self._order
        request.extensions[TRAIL] = FailoverTrail()  # its tries' spans, one request's
        request.extensions[FALLS_TO] = self._order  # an open circuit met queued: moved on
        kept: httpx2.Response | BaseException | None = None  # the primary's own failure
        for name in self._order:
            state = gate.backend_state(name)
            if not state.breaker.allows(gate.clock.now()):  # not even a wait for its cool-down
                if state is primary:
                    self._moved(primary, "circuit open")
                continue
            sent = request if state is primary else await rerouted(
                request, request.content, body, tail, primary.backend, state,
                self._models.get(name, {}),
            )
            if kept is not None:
                sent.extensions[FAILED_OVER] = True
            try:
                response = await self._transports[name].handle_async_request(sent)
            except _UNSENT as exc:
                if state is primary:
                    kept = exc
                    self._moved(primary, f"connection failed: {type(exc).__name__}")
                continue
            why = _unavailable(state, sent, response)
            if why is None:
                if state is not primary:
                    self._remember(placed, name, request.url.path, body, response)
                if isinstance(kept, httpx2.Response):
                    await kept.aclose()
                return response
            if state is primary:
                await response.aread()  # an error body: kept whole, its connection back
                kept = response
                self._moved(primary, why)
            else:
                await response.aclose()
        if kept is None:  # every circuit open: the primary answers as it did before
            return await first.handle_async_request(request)
        if isinstance(kept, BaseException):
            raise kept
        return kept

    async def _to_holder(
        self, primary: BackendState, placed: PlacedAnswers, request: httpx2.Request
    ) -> httpx2.Response | None:
        """A request reading or continuing a stored answer one of this client's fallbacks
        created (gptgate/sdk_placed.py), sent there; None: any other."""
        if not placed:  # none moved yet (the common case): nothing parsed
            return None
        try:
            body = json.loads(request.content) if request.content else {}
        except (httpx2.RequestNotRead, ValueError):
            return None
        found = placed.of(request.url.path, body if isinstance(body, dict) else {})
        if (
            found is None or found[0] not in self._order[1:]
            or not _own_request(primary, request.headers)
        ):
            return None
        name, tail = found
        sent = await rerouted(
            request, request.content, body, tail, primary.backend,
            self._gate.backend_state(name), self._models.get(name, {}),
        )
        response = await self._transports[name].handle_async_request(sent)
        self._remember(placed, name, request.url.path, body, response)
        return response

    @staticmethod
    def _remember(
        placed: PlacedAnswers, name: str, path: str, body: Mapping[str, Any],
        response: httpx2.Response,
    ) -> None:
        """A stored answer ``name`` created (a create the server keeps): its id placed."""
        if (
            request_is_create(path) and response.status_code < 300 and stored(path, body)
        ):
            sniff_id(response, lambda answer_id: placed.placed(answer_id, name))

    def _moved(self, primary: BackendState, why: str) -> None:
        warn_once(
            _log, primary, "sdk_failover",
            "SDK requests on gate.http_client(%r) fail over to %s: %s",
            primary.name, ", ".join(repr(n) for n in self._order[1:]), why,
        )
