"""The openai SDK on ``gate.http_client`` under a scaled clock: how long a request waits for
a permit is the SDK's own timeout, which httpx counts in real seconds.

Under ``ScaledClock(5)`` (the chaos suite's) the SDK's 10 s timeout used to bound the permit
wait at 10 *gateway* seconds — 2 real seconds — and the limiter shed at once whatever it
predicted to wait longer: every preview of the mixed chaos run ended in
``openai.APITimeoutError`` while the gateway's own calls, bound by their deadline, queued.
"""

from __future__ import annotations

import anyio
import httpx2
import openai

import gptgate as gg
from gptgate.testing import run_virtual
from tests.streamserver import BASE_URL, USER, GeneratingServer, raised_by, sdk_on

SCALE = 5.0


class ScaledLoopClock:
    """The event loop's time (virtual under ``run_virtual``), ``SCALE`` times faster."""

    scale = SCALE

    def now(self) -> float:
        return anyio.current_time() * SCALE

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(0.0, seconds) / SCALE)

    def to_real(self, seconds: float) -> float:
        return seconds / SCALE


async def _second_waits(
    answer_s: float, sdk_timeout: float, deadline_s: float | None = None
) -> tuple[BaseException | None, float, int]:
    async with anyio.create_task_group() as tg:
        server = GeneratingServer(tg, answer_s=answer_s)  # real (loop) seconds
        backend = gg.Backend(
            name="b", base_url=BASE_URL, model="m", concurrency=1, timeout=600,
            transport=httpx2.MockTransport(server),
        )
        gate = gg.Gateway([backend], clock=ScaledLoopClock(), seed=1, deadline_s=deadline_s)
        async with gate:
            client: openai.AsyncOpenAI = sdk_on(gate, timeout=sdk_timeout)  # real seconds

            async def first() -> None:  # (cut by the close when it outlasts the test)
                await raised_by(client.chat.completions.create(model="m", messages=USER))  # type: ignore[arg-type]

            tg.start_soon(first)  # holds the only permit for answer_s
            await anyio.sleep(0.1)
            started = anyio.current_time()
            error = await raised_by(
                client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
            )
            waited = anyio.current_time() - started
        tg.cancel_scope.cancel()
    return error, waited, server.requests


def test_the_sdk_timeout_bounds_the_permit_wait_in_real_seconds() -> None:
    error, waited, requests = run_virtual(_second_waits, 1.0, 3.0)
    # the permit frees after 0.9 real seconds, well within the SDK's 3: it waits that long
    # (not 3 gateway seconds, 0.6 real), then takes its own 1 s answer
    assert error is None, repr(error)
    assert 1.8 <= waited <= 2.1
    assert requests == 2


def test_the_gateway_deadline_bounds_an_sdk_requests_permit_wait() -> None:
    # the SDK would wait 60 real seconds; the gateway's deadline is 2 gateway seconds
    error, waited, requests = run_virtual(_second_waits, 10.0, 60.0, 2.0)
    assert isinstance(error, openai.APITimeoutError)
    assert isinstance(error.__cause__, httpx2.PoolTimeout)
    assert 0.35 <= waited <= 0.45  # 2 gateway seconds: 0.4 real
    assert requests == 1  # nothing sent
