"""A stream a guarded *sync* function returns is not read past the call's deadline.

The caller reads it in its own thread, where no read can be cut from the gateway's loop: the
guard cut its call at the deadline on the loop and gave the permit up, while the thread read
on — a generator yielding every 0.2 s for 6 s was read to its end past a 1 s deadline, and so
was a sync openai SDK stream on the SDK's own HTTP client. Now the next read after the
deadline raises: ``RequestTimeout(deadline=True)`` for the application's own generator, the
SDK's timeout error (openai's ``APITimeoutError``) for the SDK's stream.

Wall-clock (a SyncGateway runs its own loop thread): the bounds below leave seconds of slack
against the 6 s a read to the end takes, so load cannot flip them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import openai

import gptgate as gg
from tests.streamserver import BASE_URL, USER

DEADLINE_S = 1.0
PIECES, EVERY_S = 30, 0.2  # 6 s to read to the end


def _backend() -> gg.Backend:
    return gg.Backend(
        name="b", base_url=BASE_URL, model="m", concurrency=2, timeout=30,
        transport=httpx2.MockTransport(lambda request: httpx2.Response(500)),
    )


def _read(stream: Any) -> tuple[float, int, BaseException | None]:
    start, read, error = time.monotonic(), 0, None
    try:
        for _ in stream:
            read += 1
    except Exception as exc:
        error = exc
    return time.monotonic() - start, read, error


def _slow_events() -> Iterator[bytes]:
    chunk = {
        "id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
        "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}],
    }
    for _ in range(PIECES):
        time.sleep(EVERY_S)
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def test_a_returned_generator_is_cut_at_the_sync_guards_deadline() -> None:
    with gg.SyncGateway([_backend()], deadline_s=DEADLINE_S) as gate:

        @gate.guard(backend="b")
        def opened() -> Iterator[str]:
            def pieces() -> Iterator[str]:
                for _ in range(PIECES):
                    time.sleep(EVERY_S)
                    yield "piece"

            return pieces()

        took, read, error = _read(opened())
        assert isinstance(error, gg.RequestTimeout) and error.deadline
        assert took < PIECES * EVERY_S - 2.0  # was 6 s: every piece read
        assert read < PIECES
        # the permit came back (after the abandon grace: the backend may still run it)
        grace = time.monotonic() + gate.gateway.backend_state("b").backend.abandon_grace_s + 5
        while gate.stats()["b"].in_flight and time.monotonic() < grace:
            time.sleep(0.05)
        assert gate.stats()["b"].in_flight == 0


def test_a_returned_sync_sdk_stream_is_cut_at_the_sync_guards_deadline() -> None:
    own = httpx2.Client(
        transport=httpx2.MockTransport(
            lambda request: httpx2.Response(
                200, headers={"content-type": "text/event-stream"}, content=_slow_events()
            )
        ),
        base_url=BASE_URL,
    )
    client = openai.OpenAI(api_key="x", base_url=BASE_URL, max_retries=0, http_client=own)
    with gg.SyncGateway([_backend()], deadline_s=DEADLINE_S) as gate:

        @gate.guard(backend="b")
        def opened() -> Any:
            return client.chat.completions.create(
                model="m", messages=USER, stream=True  # type: ignore[arg-type]
            )

        took, read, error = _read(opened())
        assert isinstance(error, openai.APITimeoutError)  # the SDK's own error: typed
        assert took < PIECES * EVERY_S - 2.0
        assert read < PIECES
    own.close()
