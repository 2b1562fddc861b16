"""``@gate.guard``'s contract with the code it wraps: what it accepts, what it retries, and
that the caller sees the wrapped code's own exception — whole (issue 13, defects 8, 10, 11)."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator

import httpx2
import pytest

import gptgate as gg
from gptgate.guard import classify_exception
from gptgate.testing import LoopClock, run_virtual, sim_backend

USER = [{"role": "user", "content": "hi"}]


class CacheConnectionError(Exception):
    """The application's own error, named like a transport one."""


class ReadTimeoutHappened(Exception):
    """The application's own error, named like a timeout."""


async def _own_errors(error: type[Exception]) -> tuple[int, int, bool, float]:
    clock = LoopClock()
    backend, _ = sim_backend("gpu", name="gpu", clock=clock)
    async with gg.Gateway([backend], clock=clock, seed=1) as gate:
        calls = 0

        @gate.guard(backend="gpu")
        async def lookup() -> str:
            nonlocal calls
            calls += 1
            raise error("redis is down")

        for _ in range(6):
            with pytest.raises(error):
                await lookup()
        stats = gate.stats()["gpu"]
        began = clock.now()
        await gate.chat(USER, max_tokens=5)  # the LLM backend is fine
        return calls, stats.failures, stats.circuit != "closed", clock.now() - began


@pytest.mark.parametrize("error", [CacheConnectionError, ReadTimeoutHappened, ValueError])
def test_the_applications_own_errors_pass_through_unretried_and_uncounted(
    error: type[Exception],
) -> None:
    """A user's ``CacheConnectionError`` was retried 3× as an LLM failure and opened the LLM
    backend's circuit (the next ``gate.chat`` waited 5.1 s); a ``ValueError`` counted as a
    backend failure. Classified by type now, never by name."""
    calls, failures, circuit_open, chat_s = run_virtual(_own_errors, error)
    assert calls == 6  # once each: not retried
    assert failures == 0
    assert not circuit_open
    assert chat_s < 2.0


def test_classification_is_by_type() -> None:
    assert isinstance(classify_exception(httpx2.ReadTimeout("t"), "b"), gg.RequestTimeout)
    assert isinstance(classify_exception(httpx2.ConnectError("c"), "b"), gg.BackendError)
    assert isinstance(classify_exception(TimeoutError(), "b"), gg.RequestTimeout)
    for own in (CacheConnectionError("x"), ReadTimeoutHappened("x"), ValueError("x")):
        assert type(classify_exception(own, "b")) is gg.GateError


def test_the_sdks_own_errors_are_classified_by_type() -> None:
    openai = pytest.importorskip("openai")
    request = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")
    assert isinstance(
        classify_exception(openai.APITimeoutError(request=request), "b"),  # type: ignore[arg-type]
        gg.RequestTimeout,
    )
    assert isinstance(
        classify_exception(openai.APIConnectionError(request=request), "b"),  # type: ignore[arg-type]
        gg.BackendError,
    )


def test_a_sync_function_or_async_generator_is_refused_at_decoration() -> None:
    """They failed only when called — after a sync SDK call had been sent and billed."""
    gate = gg.Gateway([gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="m")])

    def sync_call() -> str:
        return "sent"

    async def chunks() -> AsyncIterator[str]:
        yield "x"

    for fn in (sync_call, chunks):
        with pytest.raises(TypeError, match="async"):
            gate.guard()(fn)  # type: ignore[arg-type]
    assert inspect.iscoroutinefunction(gate.guard()(_coroutine))


async def _coroutine() -> str:
    return "ok"


def test_guard_written_without_parentheses_says_so() -> None:
    """``@gate.guard`` (the prose's spelling) on a function failed with Python's "guard() takes
    1 positional argument but 2 were given", naming neither the fix nor the function."""
    backends = [gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="m")]

    def plain() -> str:
        return "sent"

    with pytest.raises(TypeError, match=r"@gate\.guard\(\).*_coroutine"):
        gg.Gateway(backends).guard(_coroutine)  # type: ignore[arg-type]
    sync_gate = gg.SyncGateway(backends)
    try:
        with pytest.raises(TypeError, match=r"@gate\.guard\(\).*plain"):
            sync_gate.guard(plain)  # type: ignore[arg-type]
    finally:
        sync_gate.close()


class _Flaky(Exception):
    status_code = 503


async def _retried_chain() -> BaseException:
    clock = LoopClock()
    backend, _ = sim_backend("gpu", name="gpu", clock=clock)
    async with gg.Gateway([backend], clock=clock, seed=1) as gate:

        @gate.guard(backend="gpu")
        async def call() -> str:
            try:
                raise OSError("the socket said no")
            except OSError as low:
                raise _Flaky("service unavailable") from low

        with pytest.raises(_Flaky) as caught:
            await call()
        return caught.value


def test_after_retrying_the_original_exception_keeps_its_cause() -> None:
    """The guard re-raised the SDK's exception with its ``__cause__`` wiped."""
    error = run_virtual(_retried_chain)
    assert isinstance(error.__cause__, OSError)
    assert str(error.__cause__) == "the socket said no"


def test_the_anthropic_sdks_connection_errors_are_the_backends() -> None:
    """``anthropic.APIConnectionError`` (a killed server under the sync Anthropic SDK in a
    ``@gate.guard``) derives from no HTTP stack's error: it was taken for the application's
    own — never retried, no failure of the backend's — where openai's same error was."""
    anthropic = pytest.importorskip("anthropic")
    request = httpx2.Request("POST", "http://127.0.0.1/v1/messages")
    assert isinstance(
        classify_exception(anthropic.APITimeoutError(request=request), "b"), gg.RequestTimeout
    )
    assert isinstance(
        classify_exception(anthropic.APIConnectionError(request=request), "b"), gg.BackendError
    )


async def _guarded_anthropic_connection_error() -> tuple[int, int]:
    anthropic = pytest.importorskip("anthropic")
    clock = LoopClock()
    backend, _ = sim_backend("gpu", name="gpu", clock=clock)
    async with gg.Gateway([backend], clock=clock, seed=1) as gate:
        calls = 0

        @gate.guard(backend="gpu")
        async def ask() -> str:
            nonlocal calls
            calls += 1
            raise anthropic.APIConnectionError(
                request=httpx2.Request("POST", "http://127.0.0.1/v1/messages")
            )

        with pytest.raises(anthropic.APIConnectionError):  # the caller sees the SDK's own
            await ask()
        return calls, gate.stats()["gpu"].failures


def test_a_guarded_anthropic_connection_error_is_retried_and_counted() -> None:
    calls, failures = run_virtual(_guarded_anthropic_connection_error)
    assert calls > 1
    assert failures == calls
