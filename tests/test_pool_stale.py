"""A kept-alive connection the server drops as the next request arrives (llama.cpp's
llama-server does this to ~5% of requests on a reused connection: "Server disconnected
without sending a response") is a stale connection, not a backend failure: the request goes
again at once on a fresh connection, with no failed attempt, no retry spent and no loss for
the limiter. A connection that fails on its first request is not stale: that stays a failure.
Real loopback HTTP (a raw asyncio server), since the fault lives in connection reuse."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import pytest

import gptgate as gg

BODY = json.dumps({
    "id": "c1", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1},
}).encode()


class DroppingServer:
    """Answers a connection's first ``serve`` requests, then closes it when the next one
    arrives, without a byte of response (``serve=0``: every connection dies at once)."""

    def __init__(self, serve: int) -> None:
        self.serve = serve
        self.requests = 0
        self.dropped = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0
        self._server: asyncio.Server

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0)
        )
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                self.requests += 1
                if served >= self.serve:
                    self.dropped += 1
                    return  # close without a response
                served += 1
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(BODY)}\r\n\r\n".encode() + BODY
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    def __enter__(self) -> DroppingServer:
        self._thread.start()
        self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        # end the connections' handlers on their own loop, then close it: left suspended, a
        # handler was garbage-collected during a later test, its ``finally`` ran on a closed
        # loop, and pytest reported the error there (tests/test_profile.py, in CI)
        async def shutdown() -> None:
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


@pytest.fixture
def reuse_once() -> Iterator[DroppingServer]:
    with DroppingServer(serve=1) as server:
        yield server


def gateway(port: int, **options: object) -> gg.Gateway:
    backend = gg.Backend(name="b", base_url=f"http://127.0.0.1:{port}/v1", model="m",
                         concurrency=1, timeout=5)
    return gg.Gateway([backend], **options)  # type: ignore[arg-type]


async def test_a_stale_kept_alive_connection_is_sent_again_not_failed(
    reuse_once: DroppingServer,
) -> None:
    gate = gateway(reuse_once.port, max_attempts=1)
    async with gate:
        results = [await gate.chat([{"role": "user", "content": f"q{i}"}]) for i in range(4)]
        stats = gate.stats()["b"]
        pool = stats.pool
    assert [r.text for r in results] == ["hi"] * 4
    assert all(r.attempts == 1 for r in results)
    assert stats.failures == 0 and stats.retries == 0
    # every second call found its connection dropped, and went again on a new one
    assert reuse_once.dropped == 3 and pool.stale_retries == 3


async def test_the_sdk_on_gate_http_client_gets_the_same_resend(
    reuse_once: DroppingServer,
) -> None:
    openai = pytest.importorskip("openai")
    gate = gateway(reuse_once.port)
    async with gate:
        client = openai.AsyncOpenAI(api_key="k", base_url=f"http://127.0.0.1:{reuse_once.port}/v1",
                                    http_client=gate.http_client("b"), max_retries=0)
        for i in range(3):
            reply = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"q{i}"}]
            )
            assert reply.choices[0].message.content == "hi"
    assert reuse_once.dropped == 2


async def test_a_connection_that_fails_its_first_request_is_a_failure() -> None:
    with DroppingServer(serve=0) as server:
        gate = gateway(server.port, max_attempts=1)
        async with gate:
            with pytest.raises(gg.BackendError):
                await gate.chat([{"role": "user", "content": "q"}])
            pool = gate.stats()["b"].pool
        # sent once: a fresh connection that dies is the backend's fault, not a stale one
        assert server.requests == 1 and pool.stale_retries == 0
