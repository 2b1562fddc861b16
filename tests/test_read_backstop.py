"""A non-streamed answer is bounded by the backend's ``timeout`` (headers and whole body),
not by ``idle_timeout``: the pooled client's read timeout is only a backstop under the
attempt's own bounds. Before, with ``first_byte_timeout`` set below ``idle_timeout`` (a
streaming-minded config: ``first_byte_timeout=10``), the client's read timeout became
``idle_timeout``, so a plain answer still generating at 30 s died as ``read timeout
(ReadTimeout)`` though ``timeout=60`` — every attempt, billed, retried. Real loopback HTTP
(a raw asyncio server), since the cut is the HTTP client's own read timeout."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import pytest

import gptgate as gg
from gptgate.clock import SystemClock
from gptgate.pool import BackendPool

BODY = json.dumps({
    "id": "c1", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1},
}).encode()


class SlowServer:
    """Answers every request after ``delay_s`` of silence (a non-streamed answer being
    generated: no byte until it is done)."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.requests = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0)
        )
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                self.requests += 1
                await asyncio.sleep(self.delay_s)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(BODY)}\r\n\r\n".encode() + BODY
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    def __enter__(self) -> SlowServer:
        self._thread.start()
        self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


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
