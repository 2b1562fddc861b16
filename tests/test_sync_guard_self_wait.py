"""The sync facade's self-wait: a ``SyncGateway.guard``-ed function on a limit of one opens a
sync SDK stream, leaves it unread and sends a second request. The stream holds the guard's
permit and is read only by its pump as far as the caller takes chunks (gptgate/sync_http.py):
the caller's thread, blocked on the second request, takes none. Before, that request waited the
stream's ``idle_timeout`` out (30 s on the gateway's clock, scaled 50x here, so the bounded
join alone does not tell) and then went on — the body returned "not refused"; now it is
answered at once with the 409 of gptgate/guard_self_wait.py, as in async code."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from gptgate.sim import SimEngine
from tests.test_sync_gateway import USER, assert_idle, serve, sync_gate, until

IDLE_S = 30.0
#: far below the idle timeout: a request that waits for it fails the bound
BOUND_S = 10.0


@pytest.fixture
def long_answers() -> Iterator[tuple[str, SimEngine]]:
    yield from serve(400)


def test_a_sync_guarded_request_behind_its_own_unread_stream_is_refused_at_once(
    long_answers: tuple[str, SimEngine],
) -> None:
    base_url, _ = long_answers
    with sync_gate(base_url, concurrency=1, idle_timeout=IDLE_S) as gate:
        client = openai.OpenAI(
            api_key="sk-test", base_url=base_url, http_client=gate.http_client("sim"),
            max_retries=0,
        )

        @gate.guard(backend="sim")
        def body() -> str:
            stream: Any = client.chat.completions.create(
                model="m", messages=USER, max_tokens=400, stream=True  # type: ignore[arg-type]
            )
            next(iter(stream))  # the stream is open, and the body reads no further
            try:
                client.chat.completions.create(model="m", messages=USER, max_tokens=5)  # type: ignore[arg-type]
            finally:
                stream.close()
            return "not refused"

        out: list[object] = []

        def run() -> None:
            try:
                out.append(body())
            except BaseException as error:
                out.append(error)

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(BOUND_S)
        assert not worker.is_alive(), "the second request waited on the body's own stream"
        (error,) = out
        assert isinstance(error, openai.ConflictError), error
        assert "unread" in str(error) and "concurrency" in str(error)
        until(lambda: gate.stats()["sim"].in_flight == 0)
        assert_idle(gate)
