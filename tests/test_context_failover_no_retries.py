"""A prompt too long for one backend's window still goes to a larger one with retries off.

``max_attempts=1`` says "do not send the same request again after a failure". Moving a prompt
the server said can never fit its window (``RequestTooLargeError`` with a status) to a backend
with a larger window is no such retry: the first backend could not run it, ever. Before, a user
who turned retries off (gateway-wide or per call) got the small backend's context error while
the large backend sat idle; the move is outside ``max_attempts``, as it is outside the retry
budget and back-off (gptgate/context_failover.py). So is a refused key's move
(gptgate/credential_failover.py), for the same reason.
"""

from __future__ import annotations

import anyio
import httpx2
import pytest

import gptgate as gg
from gptgate.errors import RequestTooLargeError
from tests.test_context_exceeded import _answering, _refusing

USER = [{"role": "user", "content": "a long prompt"}]


def _gate(
    small: httpx2.MockTransport, large: httpx2.MockTransport, **options: object
) -> gg.Gateway:
    def backend(name: str, transport: httpx2.MockTransport) -> gg.Backend:
        return gg.Backend(name=name, provider="llamacpp", base_url="http://127.0.0.1:9/v1",
                          model="m", transport=transport, tier=name)

    return gg.Gateway([backend("small", small), backend("large", large)], **options)  # type: ignore[arg-type]


async def _ask(gate: gg.Gateway, stream: bool, **options: object) -> gg.ChatResult:
    if stream:
        async with gate.stream(USER, max_tokens=8, **options) as s:  # type: ignore[arg-type]
            async for _ in s:
                pass
        return s.result
    return await gate.chat(USER, max_tokens=8, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream"])
@pytest.mark.parametrize("where", ["gateway", "call"])
def test_retries_off_still_moves_a_prompt_too_long_for_the_small_window(
    stream: bool, where: str
) -> None:
    sent: list[str] = []
    gateway_options = {"max_attempts": 1} if where == "gateway" else {}
    call_options = {"max_attempts": 1} if where == "call" else {}

    async def main() -> None:
        gate = _gate(_refusing(sent, "small"), _answering(sent, "large"), **gateway_options)
        async with gate:
            result = await _ask(gate, stream, **call_options)
            assert result.backend == "large"
            stats = gate.stats()
            assert stats["small"].circuit == "closed"
            # the move is no retry: nothing counted as one, and the large backend's
            # answer is the call's first counted attempt
            assert gate.ledger.entries["large"].calls_ok == 1

    anyio.run(main)
    assert sent == ["small", "large"]


def test_retries_off_still_sends_the_request_only_once_to_each_backend() -> None:
    """A move is bounded by the backends the call has not tried: with every window too small,
    each is asked once and the last refusal is raised — no retry of any of them."""
    sent: list[str] = []

    async def main() -> None:
        async with _gate(_refusing(sent, "small"), _refusing(sent, "large"),
                         max_attempts=1) as gate:
            with pytest.raises(RequestTooLargeError):
                await gate.chat(USER, max_tokens=8)

    anyio.run(main)
    assert sorted(sent) == ["large", "small"]


def test_retries_off_does_not_retry_a_server_error_after_the_move() -> None:
    """After the move, the large backend's 500 is the call's one attempt: not retried."""
    sent: list[str] = []

    def failing(request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET":
            return httpx2.Response(404)
        sent.append("large")
        return httpx2.Response(500, json={"error": {"message": "boom", "type": "server_error"}})

    async def main() -> None:
        async with _gate(_refusing(sent, "small"), httpx2.MockTransport(failing),
                         max_attempts=1) as gate:
            with pytest.raises(gg.BackendError):
                await gate.chat(USER, max_tokens=8)

    anyio.run(main)
    assert sent == ["small", "large"]



def test_a_move_does_not_use_up_an_attempt_of_a_retrying_call() -> None:
    """With ``max_attempts=2``, a call moved off the small window still has its retry on the
    large backend, and the retry goes there, not back to the small window (before: the move
    spent an attempt; with it not spent, the retry of the large backend's 500 went back to
    the small one — the router prefers a backend that failed the call to none — and ended
    the call with the same context error)."""
    sent: list[str] = []

    def flaky(request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET":
            return httpx2.Response(404)
        sent.append("large")
        if sent.count("large") == 1:
            return httpx2.Response(500, json={"error": {"message": "boom", "type": "server_error"}})
        return _answering([], "large").handler(request)

    async def main() -> None:
        async with _gate(_refusing(sent, "small"), httpx2.MockTransport(flaky),
                         max_attempts=2, retry_budget_ratio=None, backoff_base_s=0.001) as gate:
            result = await gate.chat(USER, max_tokens=8)
            assert result.backend == "large"

    anyio.run(main)
    assert sent == ["small", "large", "large"]
