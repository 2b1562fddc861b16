"""``gate.embed``: embeddings through the gateway, merged across callers and split at caps.

Which backends serve embeddings is explicit: those with ``Backend(embedding_model=...)``
(a chat deployment's server often serves an embedding model beside it; a dedicated one
states both). A call names the model or takes the first such backend's. Texts are queued
in a :class:`~gptgate.embed_batcher.Coalescer` per (model, privacy, extra parameters): what
arrives within ``embed_window_s`` goes as one request, up to the smallest input and token cap
of the backends it may go to (``Backend.embedding_max_inputs`` / ``embedding_max_tokens``,
else the provider preset's). Each request is routed (privacy, health, predicted wait),
retried under the gateway's retry policy and budget, and sent through the backend's guarded
transport (the one behind ``gate.http_client``): its limiter's permit, the dollar budget, a
CLIENT span ``embeddings {model}``, a ledger entry of its input tokens at the backend's price,
and ``stats()`` counters — as for a chat attempt.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

import httpx2
from opentelemetry.trace import SpanContext

from .budget import CALLERS, Callers
from .embed_batcher import Coalescer, EmbedCaps, Tally, Vector
from .errors import BackendError, BadRequestError, GateError, NoBackendError
from .fork_rebuild import open_in_child
from .guard import classify_exception
from .providers import PROVIDERS
from .scrub import remember_call_headers
from .sdk_client import REFUSAL_EXTENSION, GuardTransport
from .telemetry import LINKS
from .tokens import estimate_text_tokens

if TYPE_CHECKING:
    from .config import Backend
    from .gateway import Gateway
    from .routing import BackendState

__all__ = ["DEFAULT_MAX_INPUTS", "Embedder", "embedding_caps", "embeddings_url"]

#: a backend whose provider states no input cap takes this many inputs a request
DEFAULT_MAX_INPUTS = 256
#: ``gate.embed``'s priority in the limiters' queues, as ``gate.chat``'s default scenario
_PRIORITY = 5


def embedding_caps(backend: Backend) -> EmbedCaps:
    """A backend's caps per embeddings request: its own fields, else its provider's."""
    preset = PROVIDERS.get(backend.provider)
    inputs = backend.embedding_max_inputs or (preset and preset.max_embedding_inputs)
    tokens = backend.embedding_max_tokens or (preset and preset.max_embedding_tokens)
    return EmbedCaps(max_inputs=inputs or DEFAULT_MAX_INPUTS, max_tokens=tokens or None)


def _check_texts(texts: object) -> list[str]:
    items = [texts] if isinstance(texts, str) else texts
    if not isinstance(items, Sequence) or isinstance(items, (bytes, bytearray)):
        raise BadRequestError(
            f"embed takes a string or a list of strings, got {type(texts).__name__}"
        )
    for index, text in enumerate(items):
        if not isinstance(text, str):
            got = "None" if text is None else type(text).__name__
            raise BadRequestError(
                f"embed: input {index} must be a string, got {got} (token ids are not "
                f"taken); nothing was sent"
            )
        if not text:
            raise BadRequestError(
                f"embed: input {index} must be a non-empty string (providers refuse an empty "
                f"one with a 400 that would fail every caller merged with it); nothing was sent"
            )
    return list(items)


#: ``gate.chat``'s own options: passed to ``gate.embed`` they would reach the provider as
#: request parameters (an unknown one is a 400 that fails every caller merged with it)
_CHAT_OPTIONS = (
    "scenario", "priority", "max_attempts", "hedge", "cache", "cache_key", "tier", "stream",
    "accept",
)


def _refuse_chat_options(params: dict[str, Any]) -> None:
    for name in _CHAT_OPTIONS:
        if name in params:
            raise BadRequestError(
                f"{name}= is a gate.chat option, not one of gate.embed's (model=, private=, "
                f"backend=, timeout=); anything else is sent to the provider as a parameter, "
                f"so it was refused: nothing was sent"
            )


class Embedder:
    """The gateway's embeddings: coalescers per request shape, routing, the wire."""

    def __init__(self, gate: Gateway) -> None:
        self._gate = gate
        #: one per request shape in use, dropped once idle (a shape per end user's ``user=``
        #: or tenant header would otherwise stay for good); their counts stay in the tally
        self._coalescers: dict[tuple[str, bool, str | None, str], Coalescer] = {}
        self._tally = Tally()
        self._clients: dict[str, httpx2.AsyncClient] = {}

    def _eligible(self, model: str | None, private: bool, backend: str | None) -> list[Backend]:
        found = [
            b for b in self._gate.config.backends
            if b.embedding_model is not None
            and (model is None or b.embedding_model == model)
            and (not private or b.private)
            and (backend is None or b.name == backend)
        ]
        if not found:
            raise NoBackendError(
                f"no backend serves embeddings for model={model!r} (private={private}, "
                f"backend={backend!r}): set Backend(embedding_model=...) on those that do"
            )
        return found

    async def embed(
        self,
        texts: str | Sequence[str],
        *,
        model: str | None = None,
        private: bool = False,
        backend: str | None = None,
        timeout: float | None = None,
        **params: Any,
    ) -> list[Vector] | Vector:
        """The vectors of ``texts`` in order (one vector for one string), within ``timeout``
        (else the gateway's ``deadline_s``)."""
        gate = self._gate
        await open_in_child(gate)  # in a forked child, its first call opens it
        gate.runner  # noqa: B018 - GatewayClosedError before anything is queued
        _refuse_chat_options(params)
        # HTTP headers, as the SDK and gate.chat send them (in the body: a 400 for everyone
        # merged); callers with other headers never share a request (gateway checked them)
        headers: dict[str, str] = dict(params.pop("extra_headers", None) or {})
        remember_call_headers(headers)
        items = _check_texts(texts)
        if not items:
            return []
        eligible = self._eligible(model, private, backend)
        resolved = model or eligible[0].embedding_model
        assert resolved is not None
        extra = json.dumps([params, headers], sort_keys=True, default=str)
        key = (resolved, private, backend, extra)
        coalescer = self._coalescers.get(key)
        if coalescer is None:
            coalescer = self._coalescers[key] = self._coalescer(
                resolved, private, backend, params, headers, eligible
            )
        # registered like a chat call: a closing gateway gives it the grace, then ends it
        # with GatewayClosedError
        deadline_s = timeout or gate.config.deadline_s
        deadline = None if deadline_s is None else gate.clock.now() + deadline_s
        with gate.calls.call():
            waiter = coalescer.add(items, [estimate_text_tokens(t) for t in items], deadline)
            try:
                await waiter.wait(gate.clock)
            finally:
                waiter.cancelled = True  # its texts still queued are not sent
                if coalescer.idle and self._coalescers.get(key) is coalescer:
                    del self._coalescers[key]
        vectors = waiter.result()
        return vectors[0] if isinstance(texts, str) else vectors

    def statistics(self) -> dict[str, int]:
        """Requests sent and texts in them, over every coalescer."""
        return {"requests": self._tally.requests, "inputs": self._tally.inputs}

    def _coalescer(
        self, model: str, private: bool, backend: str | None, params: dict[str, Any],
        headers: dict[str, str], eligible: list[Backend],
    ) -> Coalescer:
        caps = [embedding_caps(b) for b in eligible]
        token_caps = [c.max_tokens for c in caps if c.max_tokens is not None]
        merged = EmbedCaps(
            max_inputs=min(c.max_inputs for c in caps),
            max_tokens=min(token_caps) if token_caps else None,
        )
        names = frozenset(b.name for b in eligible)

        async def send(
            texts: list[str], deadline: float | None, links: Sequence[SpanContext],
            callers: Callers,
        ) -> list[Vector]:
            return await self._send(
                names, model, texts, params, deadline, links, callers, headers
            )

        return Coalescer(
            send, self._spawn, self._gate.clock, merged, self._gate.config.embed_window_s,
            self._tally,
        )

    def _spawn(self, task: Callable[[], Coroutine[Any, Any, None]]) -> bool:
        return self._gate._spawn(task)

    async def _send(
        self, names: frozenset[str], model: str, texts: list[str], params: dict[str, Any],
        deadline: float | None, links: Sequence[SpanContext] = (),
        callers: Callers | None = None, headers: dict[str, str] | None = None,
    ) -> list[Vector]:
        """One request's texts (with its callers' ``extra_headers``), retried (failing over)
        under the gateway's policy until the latest deadline of its callers; ``callers``:
        whom the dollar budget counts (several: merged, each sent alone if the budget refuses
        them together)."""
        from .gateway import _ACCEPTED  # (gateway imports this module)

        gate = self._gate
        # texts queued before a close began are accepted work: sent within the grace (this
        # task is the delivery's own, so the mark stays with it)
        _ACCEPTED.set(True)
        runner = gate.runner
        failed: set[str] = set()
        body = json.dumps({"model": model, "input": texts, **params}).encode()

        async def attempt(number: int) -> list[Vector]:
            state = self._choose(names, failed)
            if number > 1:
                state.retries += 1
            try:
                return await self._post(
                    state, body, len(texts), deadline, links, callers, headers
                )
            except GateError as error:
                if not isinstance(error, BadRequestError):
                    failed.add(state.name)
                raise

        return await runner.retry.run(attempt, deadline=deadline, budget=runner.budget)

    def _choose(self, names: frozenset[str], failed: set[str]) -> BackendState:
        """The eligible backend with the shortest predicted wait, one whose circuit is closed
        and which has not failed this request if there is one."""
        gate = self._gate
        now = gate.clock.now()
        states = [gate.backend_state(name) for name in sorted(names)]
        ready = [s for s in states if s.breaker.allows(now)] or states
        fresh = [s for s in ready if s.name not in failed] or ready
        return min(fresh, key=lambda s: s.predicted_s(False))

    async def _post(
        self, state: BackendState, body: bytes, count: int, deadline: float | None,
        links: Sequence[SpanContext] = (), callers: Callers | None = None,
        headers: dict[str, str] | None = None,
    ) -> list[Vector]:
        client = state.pool.client
        # in the backend's queue until the callers' deadline, as a chat call waits — not the
        # client's pool_timeout, whose PoolTimeout sent the request to the back of the queue
        # as a failed try, and ended it in RequestTimeout behind one long chat call
        clock = self._gate.clock
        queue_s = None if deadline is None else clock.to_real(max(0.0, deadline - clock.now()))
        timeout = httpx2.Timeout(**(client.timeout.as_dict() | {"pool": queue_s}))
        request = client.build_request(
            "POST", embeddings_url(state), content=body, timeout=timeout, headers=headers,
            extensions=_extensions(links, callers),
        )
        transport = GuardTransport(self._gate, state, _PRIORITY)
        try:
            response = await transport.handle_async_request(request)
            try:
                content = await response.aread()
            finally:
                await response.aclose()
        except GateError:
            raise
        except Exception as exc:
            raise classify_exception(exc, state.name) from exc
        refusal = response.extensions.get(REFUSAL_EXTENSION)
        if isinstance(refusal, GateError):  # the budget's, not the server's: typed as such
            raise refusal
        if response.status_code >= 400:
            raise state.pool.dialect.error_for_status(
                response.status_code, response.headers, content, backend=state.name
            )
        return _vectors(content, count, state.name)


def _extensions(
    links: Sequence[SpanContext], callers: Callers | None
) -> dict[str, object] | None:
    """The request's callers' spans, and the callers the budget counts (each once, in this
    request or in those it is split into: gptgate/embed_batcher.py)."""
    extensions: dict[str, object] = {}
    if links:
        extensions[LINKS] = tuple(links)
    if callers is not None:
        extensions[CALLERS] = callers
    return extensions or None


def embeddings_url(state: BackendState) -> httpx2.URL:
    """The backend's embeddings URL: its dialect's chat URL with ``chat/completions`` made
    ``embeddings`` (``{base_url}embeddings``; on Azure the deployment named by
    ``embedding_model``, with the ``api-version``)."""
    dialect = state.pool.dialect
    chat = dialect.chat_url(state.pool.client.base_url)
    path, mark, query = chat.raw_path.partition(b"?")
    if not path.endswith(b"chat/completions"):
        raise BadRequestError(
            f"backend {state.name!r}: provider {dialect.provider!r} serves no embeddings",
            backend=state.name,
        )
    path = path[: -len(b"chat/completions")] + b"embeddings"
    config = state.backend
    deployment = getattr(dialect, "deployment", None)
    if deployment is not None and config.embedding_model is not None:
        chat_part = b"/deployments/" + httpx2.URL(deployment).raw_path + b"/"
        embed_part = b"/deployments/" + httpx2.URL(config.embedding_model).raw_path + b"/"
        path = path.replace(chat_part, embed_part)
    return chat.copy_with(raw_path=path + mark + query)


def _vectors(content: bytes, count: int, backend: str) -> list[Vector]:
    """The vectors of an embeddings answer, in input order (``data[i].index``)."""
    try:
        data = json.loads(content)["data"]
        ordered = sorted(data, key=lambda item: item["index"])
        vectors = [_floats(item["embedding"]) for item in ordered]
    except (ValueError, KeyError, TypeError, binascii.Error, struct.error):
        raise BackendError("malformed embeddings answer", backend=backend) from None
    if len(vectors) != count or not all(isinstance(v, list) for v in vectors):
        raise BackendError(
            f"embeddings answer holds {len(vectors)} vectors for {count} inputs",
            backend=backend,
        )
    return vectors


def _floats(embedding: Any) -> Any:
    """A vector as floats: ``encoding_format="base64"`` answers each as the base64 of its
    little-endian float32s (as OpenAI's SDK decodes it) — a paid answer, not a malformed one
    to send again."""
    if not isinstance(embedding, str):
        return embedding
    raw = base64.b64decode(embedding, validate=True)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))
