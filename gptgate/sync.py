"""``gg.SyncGateway``: the gateway for sync code — Flask and Django views, Celery tasks,
scripts, notebooks, the sync SDKs — with the same limits, budget and ledger from any thread.

What a Flask user writes without it (each request thread running ``asyncio.run`` on a shared
gateway) cannot work: a gateway's queues and pools belong to one event loop. Here one loop
runs in one background thread (gptgate/sync_portal.py), started on first use; every blocking
verb is a task on it, so any number of threads share one limiter, router, budget and ledger.
``SyncGateway(gateway=app_gate)`` instead drives an async app's open gateway on the app's own
loop, from its worker threads.

Verbs with the same arguments, results and typed errors as ``Gateway``'s: ``chat``,
``stream`` (a context manager and a plain iterator), ``map``, ``warm``, ``guard`` (on plain
functions, gptgate/sync_guard.py), ``http_client`` (an ``httpx2.Client``,
gptgate/sync_http.py), ``batch`` (a job with blocking ``wait``/``cancel``/``refresh``,
gptgate/sync_batch.py), ``stats``, ``snapshot``, ``budget_status``, ``tier_stats``. A verb the
async gateway gains later (``embed``) is one line here: ``self._run(gw.verb, ...)``.

Fork (gunicorn ``--preload``, Celery prefork): a SyncGateway built before the fork starts a
loop of its own in the child on its first use there, and opens its gateway on it — rebuilt
fresh (pools, Redis connections) by the gateway itself, as any async Gateway is in a child
(gptgate/fork_rebuild.py); one that drives an app's gateway raises a typed error naming the
fix, since that loop stayed in the parent.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import queue
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Literal, ParamSpec, TypeVar

import httpx2
import sniffio

from .batch import RetryMode
from .batch_api import BatchLimits
from .budget import BudgetStatus
from .errors import BadRequestError, GateError, GatewayClosedError
from .gateway import BackendStats, ChatStream, Gateway
from .guard import GuardedCall
from .guard_inner import under_guard
from .guard_nested import covers_options
from .guard_parens import refuse_bare
from .ledger import Ledger
from .process_bound import refuse_pickle
from .results import ChatResult
from .scenarios import Scenario, scenario_for_call
from .sync_batch import SyncBatchJob
from .sync_guard import sync_guard
from .sync_http import GUARDED_HERE, PortalTransport
from .sync_portal import (
    AppLoop,
    LoopPortal,
    OwnLoop,
    call_on,
    run_on,
    spawn_on,
)
from .sync_self_close import refuse_close_inside_guard
from .tiers import TierStats

__all__ = ["SyncChatStream", "SyncGateway"]

P = ParamSpec("P")
R = TypeVar("R")

#: how long a closing stream waits for its task to hang up (shielded, quick)
_CLOSE_WAIT_S = 10.0
#: at interpreter exit, the grace calls still in flight get
_EXIT_GRACE_S = 2.0

_FOREIGN_LOOP = (
    "sync_gate.gateway is the async Gateway of a SyncGateway: it belongs to the SyncGateway's "
    "event loop, not to this one. From this loop either call the SyncGateway's blocking verbs "
    "in a worker thread (anyio.to_thread.run_sync), or open a Gateway on this loop and share "
    "it with sync threads through gg.SyncGateway(gateway=...)"
)


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()


class SyncChatStream:
    """``with gate.stream(m) as s: for text in s: ...``; then ``s.result``.

    Nothing is sent until iteration starts. One task on the loop reads the stream (the async
    :class:`~gptgate.ChatStream`) and hands the text to this thread as it arrives; leaving the
    block, breaking out of the loop or an interruption hangs up and gives the permit back
    before returning. The same errors as the async stream (``StreamInterruptedError`` with
    the partial text after the first token)."""

    def __init__(self, loop: LoopPortal, stream: ChatStream) -> None:
        self._loop = loop
        self._stream = stream
        self._deltas: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._task: Future[None] | None = None
        self._ended = threading.Event()
        #: the caller closed it: its iteration ends there, as a closed generator's does
        self._hung_up = False

    def __enter__(self) -> SyncChatStream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __iter__(self) -> Iterator[str]:
        if self._task is not None:
            raise RuntimeError("a ChatStream can be iterated only once")
        # read inside the caller's sync guarded try, if any (gptgate/guard_inner.py)
        self._task = spawn_on(self._loop, under_guard(GUARDED_HERE.get(), self._pump))
        return self._read()

    def _read(self) -> Iterator[str]:
        try:
            while not self._hung_up:
                delta = self._deltas.get()
                if delta is _END or self._hung_up:
                    return
                if isinstance(delta, _Failed):
                    raise delta.error
                yield delta  # type: ignore[misc]
        finally:
            self.close()

    async def _pump(self) -> None:
        """On the loop: read the whole stream in this one task."""
        try:
            async with self._stream as stream:
                async for delta in stream:
                    self._deltas.put(delta)
        except Exception as error:
            self._deltas.put(_Failed(error))
        except BaseException:  # cancelled: by close() (no reader left) or the loop stopping
            self._deltas.put(_Failed(GatewayClosedError("the SyncGateway closed mid-stream")))
            raise
        finally:
            self._deltas.put(_END)
            self._ended.set()

    def close(self) -> None:
        """Hang up now if the answer is still arriving; returns once the permit and the
        connection are given back — except on the loop's own thread (the cycle collector may
        finalize a dropped reader there), which would wait for the hang-up it has to run."""
        task = self._task
        if task is None:
            return
        self._hung_up = True
        if not task.done():
            task.cancel()
        if threading.get_ident() != self._loop.thread_id:
            self._ended.wait(_CLOSE_WAIT_S)

    @property
    def text(self) -> str:
        """What has arrived so far."""
        return self._stream.text

    @property
    def result(self) -> ChatResult:
        """The ChatResult once the stream has completed."""
        return self._stream.result


class SyncGateway:
    """A thread-safe, blocking face of :class:`~gptgate.Gateway` (docs: "Sync code").

    ``SyncGateway(backends=[...], **options)`` takes exactly ``Gateway``'s arguments and owns
    its gateway, opened on first use on a background loop and closed by :meth:`close`, the
    ``with`` block or interpreter exit. ``SyncGateway(gateway=app_gate)`` drives an async
    app's gateway (opened and closed by the app) from its worker threads."""

    def __init__(
        self,
        backends: Sequence[Any] | None = None,
        *,
        gateway: Gateway | None = None,
        **options: Any,
    ) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._opened = False
        self._loop: LoopPortal
        if gateway is not None:
            if backends is not None or options:
                raise TypeError("pass either gateway= or Gateway's arguments, not both")
            if not isinstance(gateway, Gateway):
                raise BadRequestError(
                    f"gateway must be a gptgate.Gateway, got {type(gateway).__name__}"
                )
            #: its gateway is its own (opened and closed here), not an app's it drives
            self._owned = False
            self._gateway = gateway
            self._loop = AppLoop()
        else:
            self._owned = True
            self._gateway = Gateway(backends, **options)  # bad configuration fails here
            self._loop = OwnLoop()
        _LIVE.add(self)

    #: not sent to another process, nor copied: a TypeError naming what to send
    __reduce_ex__ = refuse_pickle

    # -- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> SyncGateway:
        self._ready()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _ready(self) -> Gateway:
        """The gateway, open (opened here on first use of an owned one)."""
        if self._opened:
            return self._gateway
        with self._lock:
            if self._owned and not self._opened:
                if self._closed:
                    self._loop.portal()  # raises GatewayClosedError
                run_on(self._loop, self._gateway.start)
            self._opened = True
        return self._gateway

    def close(self, grace_s: float | None = None) -> None:
        """Close: an owned gateway is closed as ``aclose(grace_s)`` closes it (calls in
        flight get the grace, new ones are refused) and the loop's thread is joined; a driven
        app gateway stays open (the app closes it). Later calls raise ``GatewayClosedError``;
        an owned gateway's ``stats``/``snapshot``/``budget_status``/``tier_stats`` stay
        readable (its final figures). Idempotent."""
        refuse_close_inside_guard(self._gateway)  # it would wait for itself
        with self._lock:
            if self._closed:
                return
            self._closed = True
            opened = self._opened and self._owned
        try:
            if opened:
                run_on(self._loop, self._gateway.aclose, grace_s)
        finally:
            self._loop.stop()

    def _forked(self) -> None:
        """In a forked child: the parent's loop is gone; an owned gateway is opened again on
        first use, on a loop of this process's (the gateway rebuilds itself fresh — pools,
        Redis — on that first touch: gptgate/fork_rebuild.py); a driven one refuses with a
        typed error (AppLoop)."""
        self._lock = threading.Lock()
        if self._owned:
            self._opened = False
            self._loop = OwnLoop()

    @property
    def gateway(self) -> Gateway:
        """The async Gateway this drives, for async code on its own loop; from any other
        event loop a typed error (it would hang on that loop's queues)."""
        try:
            sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            return self._gateway  # a plain thread: for reading its config, not for awaiting
        # a driven gateway's loop is known once it is open there, used or not
        owner = self._loop.thread_id or self._gateway._opened.loop
        if threading.get_ident() != owner:
            raise GateError(_FOREIGN_LOOP)
        return self._gateway

    # -- calls --------------------------------------------------------------------------

    def _run(self, verb: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # inside a sync guarded try: the call runs under its permit (gptgate/guard_inner.py)
        call = functools.partial(verb, *args, **kwargs)
        return run_on(self._loop, under_guard(GUARDED_HERE.get(), call))

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        scenario: str | Scenario | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        """One chat completion, blocking: ``Gateway.chat``'s arguments, result and errors."""
        gateway = self._ready()
        return self._run(gateway.chat, messages, scenario=scenario, **kwargs)  # type: ignore[no-any-return]

    def stream(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        scenario: str | Scenario | None = None,
        **kwargs: Any,
    ) -> SyncChatStream:
        """Stream the answer: ``with gate.stream(m) as s: for text in s: ...``
        (``Gateway.stream``'s arguments; bad ones raise here)."""
        gateway = self._ready()
        stream = call_on(
            self._loop, functools.partial(gateway.stream, messages, scenario=scenario, **kwargs)
        )
        return SyncChatStream(self._loop, stream)

    def map(
        self,
        items: Iterable[Mapping[str, Any]],
        *,
        scenario: str | Scenario | None = None,
        **kwargs: Any,
    ) -> list[ChatResult | GateError]:
        """Many calls, blocking: ``Gateway.map``'s arguments and result (in order; a failed
        item holds its error). ``items`` is iterated and ``on_result`` called on the loop's
        thread: keep both quick and non-blocking."""
        gateway = self._ready()
        return self._run(gateway.map, items, scenario=scenario, **kwargs)  # type: ignore[no-any-return]

    def embed(
        self,
        texts: str | Sequence[str],
        *,
        model: str | None = None,
        private: bool = False,
        backend: str | None = None,
        timeout: float | None = None,
        **params: Any,
    ) -> Any:
        """Embedding vectors, blocking (``Gateway.embed``'s arguments and result): threads
        calling at once are merged into few requests exactly as tasks are."""
        gateway = self._ready()
        return self._run(
            gateway.embed, texts, model=model, private=private, backend=backend,
            timeout=timeout, **params,
        )

    def batch(
        self,
        items: Iterable[Mapping[str, Any]],
        *,
        job_dir: str | os.PathLike[str],
        backend: str | None = None,
        retry: RetryMode = None,
        scenario: str | Scenario | None = None,
        poll_s: float = 30.0,
        limits: BatchLimits | None = None,
        **common: Any,
    ) -> SyncBatchJob:
        """An offline job through ``backend``'s Batch API at the batch price, durable in
        ``job_dir`` (``Gateway.batch``'s arguments and errors); returns once it is submitted
        (or resumed), with blocking ``wait()``, ``cancel()`` and ``refresh()``."""
        gateway = self._ready()
        job = self._run(
            gateway.batch, items, job_dir=job_dir, backend=backend, retry=retry,
            scenario=scenario, poll_s=poll_s, limits=limits, **common,
        )
        return SyncBatchJob(self._loop, job)

    def take_up_batch(self, items: Iterable[Mapping[str, Any]], **options: Any) -> SyncBatchJob:
        """The job ``batch(items, job_dir=..., ...)`` recorded, taken up **sending nothing**
        (``Gateway.take_up_batch``): to see it or ``cancel()`` it."""
        gateway = self._ready()
        return SyncBatchJob(self._loop, self._run(gateway.take_up_batch, items, **options))

    def warm(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        backend: str | None = None,
        private: bool = False,
        tier: Literal["small", "large", "auto"] = "auto",
    ) -> list[ChatResult | GateError]:
        """Pre-warm a prompt prefix on every eligible backend (``Gateway.warm``)."""
        gateway = self._ready()
        return self._run(  # type: ignore[no-any-return]
            gateway.warm, messages, backend=backend, private=private, tier=tier
        )

    def guard(
        self,
        _bare: None = None,
        /,
        *,
        scenario: str | Scenario | None = None,
        backend: str | None = None,
        private: bool = False,
        tier: Literal["small", "large", "auto"] = "auto",
        retry: bool = True,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Decorate a plain function (a sync SDK call inside): it runs in the caller's thread
        holding a permit, retried and classified as ``Gateway.guard`` does for async ones."""
        scenario_for_call(scenario)  # an unknown name fails here, as Gateway.guard's does
        refuse_bare(_bare, "gate.guard")  # without (): gptgate/guard_parens.py
        options = {
            "scenario": scenario, "backend": backend, "private": private, "tier": tier,
            "retry": retry,
        }
        built: dict[Callable[..., Any], Callable[..., Any]] = {}

        def async_guard(body: Callable[..., Any]) -> Callable[..., Any]:
            # on the loop, opened by the caller (loop_ready); built once per function: the
            # guard looks the gateway's state up at each call, so a forked child's rebuilt
            # gateway serves it too
            if body not in built:
                built[body] = self._gateway.guard(**options)(body)  # type: ignore[arg-type]
            return built[body]

        def guarded_per_call(body: Callable[..., Any]) -> Callable[..., Any]:
            async def call(thread_call: Any) -> Any:
                return await async_guard(body)(thread_call)

            return call

        def covers(outer: GuardedCall) -> bool:
            """The guarded call this one runs inside holds a permit it may use."""
            return covers_options(self._gateway, outer, backend, private, tier)

        return sync_guard(self._loop_ready, guarded_per_call, covers)

    def _loop_ready(self) -> LoopPortal:
        self._ready()
        return self._loop

    def http_client(
        self,
        backend: str,
        *,
        priority: int | None = None,
        scenario: str | Scenario | None = None,
        fallback: Sequence[str] | None = None,
        fallback_models: Mapping[str, Mapping[str, str]] | None = None,
        **client_options: Any,
    ) -> httpx2.Client:
        """An ``httpx2.Client`` for a sync SDK (``openai.OpenAI(http_client=...)``): its
        requests go through the backend's pool and limiter on the gateway's loop, each an
        attempt with a span, a ledger entry and ``stats()`` counters (``Gateway.http_client``).
        It may be built before first use; an unknown backend or bad priority fails here.
        ``fallback``, ``fallback_models``: as ``Gateway.http_client``'s."""
        self._gateway.sdk_transport(
            backend, priority=priority, scenario=scenario, fallback=fallback,
            fallback_models=fallback_models,
        )  # checks
        transports: list[httpx2.AsyncBaseTransport] = []

        def transport() -> httpx2.AsyncBaseTransport:
            gateway = self._ready()
            # built once: it looks the backend's state up at each request, so a forked
            # child's rebuilt gateway serves it too
            if not transports:
                transports.append(
                    gateway.sdk_transport(
                        backend, priority=priority, scenario=scenario, fallback=fallback,
                        fallback_models=fallback_models,
                    )
                )
            return transports[0]

        config = next(b for b in self._gateway.config.backends if b.name == backend)
        timeout = client_options.pop("timeout", httpx2.Timeout(config.timeout))
        return httpx2.Client(
            transport=PortalTransport(self._loop_ready, transport), timeout=timeout,
            **client_options,
        )

    # -- observability (read on the loop: a consistent snapshot) ------------------------

    @property
    def ledger(self) -> Ledger:
        """Tokens and dollars per backend (``Gateway.ledger``), readable from any thread:
        the loop's thread writes it, so an entry read mid-call may be an attempt behind."""
        return self._gateway.ledger

    def _view(self, read: Callable[[Gateway], R]) -> R:
        """A read-only figure: on the loop while it runs; after ``close`` of an owned
        gateway, straight from it — its loop has stopped, nothing writes any more, and the
        final figures (an exit summary, a snapshot saved for the next start) are what a
        caller reads then, as an async ``Gateway``'s after ``aclose``."""
        with self._lock:
            final = self._closed and self._owned
        if final:
            return read(self._gateway)
        gateway = self._ready()
        return call_on(self._loop, functools.partial(read, gateway))

    def stats(self) -> dict[str, BackendStats]:
        """Per backend: limit, in flight, queued, latency, tokens, cost (``Gateway.stats``);
        readable after ``close``."""
        return self._view(Gateway.stats)

    def snapshot(self) -> dict[str, Any]:
        """What a later gateway needs to start warm (``Gateway.snapshot``); readable after
        ``close``, so a worker can save it on its way out."""
        return self._view(Gateway.snapshot)

    def budget_status(self) -> BudgetStatus | None:
        """The dollar budget's state, or None without one (``Gateway.budget_status``)."""
        return self._view(Gateway.budget_status)

    def tier_stats(self) -> TierStats:
        """``tier="auto"`` calls per classifier rule (``Gateway.tier_stats``)."""
        return self._view(Gateway.tier_stats)

    def __repr__(self) -> str:
        names = ", ".join(b.name for b in self._gateway.config.backends)
        mode = "owned" if self._owned else "driven"
        return f"SyncGateway(backends=[{names}], {mode}, closed={self._closed})"


#: every SyncGateway of the process: closed at interpreter exit, refreshed after fork
_LIVE: weakref.WeakSet[SyncGateway] = weakref.WeakSet()


def _close_all() -> None:
    for gate in list(_LIVE):
        with contextlib.suppress(Exception):  # at exit: nothing to tell anyone
            gate.close(grace_s=_EXIT_GRACE_S)


def _forked_all() -> None:
    for gate in list(_LIVE):
        gate._forked()


# registered after sync_portal's hooks, so it runs before them at exit (LIFO): the gateways
# close while their loops still run
atexit.register(_close_all)
os.register_at_fork(after_in_child=_forked_all)
