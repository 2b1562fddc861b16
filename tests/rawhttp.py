"""A raw asyncio HTTP/1.1 server on loopback, in a thread of its own, for faults that live in
the connection itself (a kept-alive connection dropped, an answer that sends no byte until it
is done) where an ASGI app or MockTransport would hide them. Subclasses say what each
request gets (``respond``)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Self

BODY = json.dumps({
    "id": "c1", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1},
}).encode()

ANSWER = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
          + f"content-length: {len(BODY)}\r\n\r\n".encode() + BODY)


class RawServer:
    """Reads each request of a connection whole and hands it to ``respond``; counts the
    connections and requests it saw."""

    def __init__(self) -> None:
        self.requests = 0
        self.connections = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._server: asyncio.Server

    async def respond(self, served: int) -> bytes | None:
        """The bytes for a request, ``served`` answered before it on its connection; None
        closes the connection without a byte. Default: the one answer, at once."""
        return ANSWER

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
                answer = await self.respond(served)
                if answer is None:
                    return  # close without a response
                served += 1
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    def __enter__(self) -> Self:
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
