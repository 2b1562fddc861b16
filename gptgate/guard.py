"""Bringing existing call sites under the gateway without rewriting them.

- ``@gate.guard(...)`` wraps any async function (an SDK call inside): the call waits for a
  permit of the chosen backend's limiter, its latency and failures feed the limit, and
  retryable failures are retried under the gateway's policy; the caller still sees the SDK's
  own exception types.
- ``gate.http_client(name)`` gives a third-party SDK an ``httpx2.AsyncClient`` whose transport
  takes a permit per request and returns it when the response is closed, sharing the backend's
  pooled connections: SDK traffic and gateway traffic obey one limit.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, ParamSpec, Protocol, TypeVar

import anyio
import httpx2

from .clock import Clock
from .errors import (
    BackendError,
    BadRequestError,
    GateError,
    RateLimitedError,
    RequestTimeout,
)
from .limits import Limiter, Permit
from .observe import usage_of
from .outcomes import report_failure
from .routing import BackendState, RouteRequest
from .scenarios import Scenario, resolve_scenario

if TYPE_CHECKING:
    from .calls import CallRunner
    from .clock import Clock
    from .config import GatewayConfig

#: the permit a guarded call holds while its body runs: a request the body makes on the same
#: backend through ``gate.http_client`` runs under it (one call, one permit). Without it, 4
#: guarded calls holding the 4 permits would each wait for a fifth — forever.
_GUARD_PERMIT: ContextVar[GuardedCall | None] = ContextVar("gptgate_guard_permit", default=None)


@dataclass(slots=True)
class GuardedCall:
    """A guarded call in progress, as the requests its body makes see it."""

    limiter: Limiter
    permit: Permit
    #: requests its body sent through ``gate.http_client`` on the guard's backend (they were
    #: seen on the wire: the guard must not count their tokens again)
    wire_attempts: int = 0

__all__ = ["GuardedGateway", "classify_exception", "make_guard"]

P = ParamSpec("P")
R = TypeVar("R")


class GuardedGateway(Protocol):
    """What the guard needs of the gateway (``Gateway`` is one). Named here, not imported,
    so that gateway.py imports this module and this module does not import gateway.py."""

    @property
    def runner(self) -> CallRunner: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def config(self) -> GatewayConfig: ...

    def default_deadline_s(self, route: RouteRequest, max_attempts: int | None = None) -> float:
        ...

    def backend_state(self, name: str) -> BackendState: ...


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _sdk_classes() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """The timeout and connection exception classes of the HTTP stacks SDKs are built on
    (httpx2, and httpx and openai when installed) — by type, never by name: a user's own
    ``CacheConnectionError`` is no LLM failure."""
    timeouts: list[type[BaseException]] = [httpx2.TimeoutException, TimeoutError]
    transport: list[type[BaseException]] = [httpx2.TransportError]
    try:
        import httpx  # type: ignore[import-not-found, unused-ignore]
    except ImportError:  # pragma: no cover - the openai SDK brings it
        pass
    else:
        timeouts.append(httpx.TimeoutException)
        transport.append(httpx.TransportError)
    try:
        import openai
    except ImportError:  # pragma: no cover - optional
        pass
    else:
        timeouts.append(openai.APITimeoutError)
        transport.append(openai.APIConnectionError)
    return tuple(timeouts), tuple(transport)


_CLASSES: tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]] | None = None


def classify_exception(exc: BaseException, backend: str) -> GateError:
    """A gptgate view of a foreign exception (an SDK's, httpx's), to decide on retries and
    on the limit's signal; the original is what the caller sees. Anything that is neither an
    HTTP status nor a timeout or transport error of a known HTTP stack is the application's
    own: a bare ``GateError`` (never retried, not the backend's fault)."""
    global _CLASSES
    if isinstance(exc, GateError):
        return exc
    status = _status_of(exc)
    name = type(exc).__name__
    if status is not None:
        if status == 429:
            return RateLimitedError(name, backend=backend, status=status)
        if status == 408:
            return RequestTimeout(name, backend=backend, status=status)
        if status == 409 or status >= 500:
            return BackendError(name, backend=backend, status=status)
        return BadRequestError(name, backend=backend, status=status)
    if _CLASSES is None:
        _CLASSES = _sdk_classes()
    timeouts, transport = _CLASSES
    if isinstance(exc, timeouts):  # before transport: openai's timeout is a connection error
        return RequestTimeout(name, backend=backend)
    if isinstance(exc, transport):
        return BackendError(name, backend=backend)
    return GateError(name, backend=backend)  # an application error: never retried


def _is_the_applications(view: GateError) -> bool:
    """The classified error says nothing about the backend (see ``classify_exception``)."""
    return type(view) is GateError


class _ForeignFailure(GateError):
    """Carries the original exception through the retry policy."""

    def __init__(self, view: GateError, original: BaseException) -> None:
        super().__init__(
            view.message,
            backend=view.backend,
            status=view.status,
            retry_after=view.retry_after,
        )
        self.retryable = view.retryable
        self.original = original


def make_guard(
    gate: GuardedGateway,
    *,
    scenario: str | Scenario | None,
    backend: str | None,
    private: bool,
    tier: Literal["small", "large", "auto"],
    retry: bool,
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    resolved = resolve_scenario(scenario)
    route = RouteRequest(
        private=private,
        tier=tier,
        backend=backend,
        latency_sensitive=resolved.latency_sensitive,
    )

    def decorator(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        if not inspect.iscoroutinefunction(fn):
            # a sync function would run (and a sync SDK call be sent and billed) before the
            # guard could see anything; an async generator is no call
            kind = "an async generator" if inspect.isasyncgenfunction(fn) else "not async"
            raise TypeError(
                f"@gate.guard wraps async functions (async def ... return); "
                f"{getattr(fn, '__qualname__', fn)!r} is {kind}"
            )

        @functools.wraps(fn)
        async def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            runner = gate.runner
            clock = gate.clock
            # the call's own work is the SDK's to bound; its wait for a permit is not endless
            deadline_s = resolved.deadline_s or gate.config.deadline_s
            deadline = clock.now() + deadline_s if deadline_s else None
            stall_s = None if deadline_s else gate.default_deadline_s(route, None if retry else 1)
            failed: set[str] = set()

            async def attempt(number: int) -> R:
                # an open circuit is waited for within bounds, as gate.chat does
                state = await runner.route(route, frozenset(failed), deadline)
                permit = await state.limiter.acquire(
                    priority=resolved.priority, deadline=deadline, stall_s=stall_s
                )
                start = clock.now()
                state.calls += 1
                if number > 1:
                    state.retries += 1  # on the backend the retry goes to
                token = _GUARD_PERMIT.set(GuardedCall(state.limiter, permit))
                try:
                    result = await _within(deadline, clock, state.name, fn(*args, **kwargs))
                except Exception as exc:
                    if isinstance(exc, RequestTimeout) and exc.deadline:
                        permit.ignore()  # the caller's deadline says nothing of the backend
                        raise
                    view = classify_exception(exc, state.name)
                    if _is_the_applications(view):
                        permit.ignore()  # the application's own error: none of the backend's
                        raise
                    report_failure(permit, view, clock.now() - start)
                    state.failures += 1
                    failed.add(state.name)
                    if isinstance(view, (BackendError, RequestTimeout)):
                        state.breaker.on_failure(clock.now())
                    if retry and view.retryable:
                        raise _ForeignFailure(view, exc) from exc
                    raise
                except BaseException:  # cancelled: no sample either way
                    permit.ignore()
                    raise
                finally:
                    _GUARD_PERMIT.reset(token)
                latency = clock.now() - start
                input_tokens, output_tokens = usage_of(result)
                permit.success(
                    latency, input_tokens=input_tokens or 0, output_tokens=output_tokens or 0
                )
                state.latency.add(latency)
                state.breaker.on_success()
                return result

            try:
                if not retry:
                    return await attempt(1)
                return await runner.retry.run(attempt, deadline=deadline)
            except _ForeignFailure as failure:
                original = failure.original
            # raised outside the handler, the SDK's exception keeps its own chain
            raise original

        return guarded

    return decorator


async def _within(
    deadline: float | None, clock: Clock, backend: str, body: Awaitable[R]
) -> R:
    """The guarded body, cut at the call's deadline (when it has one) with
    ``RequestTimeout(deadline=True)``: a retry started late would otherwise run its whole SDK
    timeout past it."""
    if deadline is None:
        return await body
    with anyio.move_on_after(clock.to_real(max(0.0, deadline - clock.now()))) as scope:
        return await body
    assert scope.cancelled_caught
    raise RequestTimeout(
        "call deadline passed in the guarded function", backend=backend, deadline=True
    )
