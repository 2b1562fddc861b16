"""A non-streamed answer is bounded by the backend's ``timeout`` (headers and whole body),
not by ``idle_timeout``: the pooled client's read timeout is only a backstop under the
attempt's own bounds. Before, with ``first_byte_timeout`` set below ``idle_timeout`` (a
streaming-minded config: ``first_byte_timeout=10``), the client's read timeout became
``idle_timeout``, so a plain answer still generating at 30 s died as ``read timeout
(ReadTimeout)`` though ``timeout=60`` — every attempt, billed, retried. Real loopback HTTP
(a raw asyncio server), since the cut is the HTTP client's own read timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import gptgate as gg
from gptgate.clock import SystemClock
from gptgate.pool import BackendPool
from tests.rawhttp import ANSWER, RawServer


class SlowServer(RawServer):
    """Answers every request after ``delay_s`` of silence (a non-streamed answer being
    generated: no byte until it is done)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    async def respond(self, served: int) -> bytes | None:
        await asyncio.sleep(self.delay_s)
        return ANSWER


@pytest.fixture
def slow() -> Iterator[SlowServer]:
    with SlowServer(delay_s=0.6) as server:
        yield server


def _backend(port: int) -> gg.Backend:
    # a streaming-minded config: headers within 0.05 s, 0.15 s of silence between chunks,
    # and 10 s for a whole attempt (a plain answer's headers come once it is generated)
    return gg.Backend(name="b", base_url=f"http://127.0.0.1:{port}/v1", model="m",
                      api_key="EMPTY", concurrency=2, first_byte_timeout=0.05,
                      idle_timeout=0.15, timeout=10.0)


def test_client_read_timeout_never_cuts_below_the_attempt_timeout() -> None:
    pool = BackendPool(_backend(1), SystemClock())
    read = pool.client.timeout.read
    assert read is not None and read >= 10.0


async def test_a_plain_answer_slower_than_idle_timeout_is_not_cut(slow: SlowServer) -> None:
    gate = gg.Gateway([_backend(slow.port)], max_attempts=1)
    async with gate:
        result = await gate.chat([{"role": "user", "content": "hi"}], stream=False)
    assert result.text == "hi"
    assert slow.requests == 1
    assert gate.stats()["b"].timeouts == 0
