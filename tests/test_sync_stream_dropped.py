"""A sync SDK stream on ``SyncGateway.http_client`` that its caller breaks off and drops
without closing (the preview pattern in a Flask view): its permit comes back, and its
finalizer — which Python's cycle collector may run on any thread, the gateway's loop thread
included — never blocks the loop.

Found by a Flask-like app of 12 threads: a guarded sync SDK stream broken after a few chunks
and left to the collector held its permit for good (every later call on that backend failed
with "the queue has not moved for 196s"), and without the guard each collection on the loop's
thread stalled the loop 10 s (the finalizer waited for the loop it was running on)."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

import gptgate as gg
from gptgate.sim import SimEngine
from gptgate.sync_portal import call_on
from tests.test_sync_gateway import USER, assert_idle, serve, sync_gate, until


@pytest.fixture
def long_answers() -> Iterator[tuple[str, SimEngine]]:
    """Answers of a few hundred tokens: a stream broken off early is far from its end."""
    yield from serve(400)


def _opener(gate: Any, base_url: str, *, guarded: bool = True) -> Callable[[], Any]:
    """A sync openai SDK's long stream on ``gate.http_client``, opened in a guard or not."""
    client = openai.OpenAI(
        api_key="sk-test", base_url=base_url, http_client=gate.http_client("sim"), max_retries=0
    )

    def open_stream() -> Any:
        return client.chat.completions.create(
            model="m", messages=USER, max_tokens=400, stream=True  # type: ignore[arg-type]
        )

    if guarded:
        return gate.guard(scenario="realtime_chat", backend="sim")(open_stream)  # type: ignore[no-any-return]
    return open_stream


def _break_off(stream: Any, chunks: int = 2) -> None:
    for i, _ in enumerate(stream):
        if i + 1 >= chunks:
            break


def _in_thread(work: Any, timeout_s: float = 30.0) -> list[object]:
    """``work()`` in a thread that must end within ``timeout_s`` (a held permit hangs it)."""
    out: list[object] = []
    worker = threading.Thread(target=lambda: out.append(work()), daemon=True)
    worker.start()
    worker.join(timeout_s)
    assert not worker.is_alive(), "a call waited for a permit nobody gives back"
    return out


def test_a_guarded_sync_sdk_stream_dropped_unread_gives_its_permit_back(
    long_answers: tuple[str, SimEngine],
) -> None:
    base_url, _ = long_answers
    with sync_gate(base_url, concurrency=1) as gate:
        open_stream = _opener(gate, base_url)

        def previews() -> int:
            for _ in range(3):  # concurrency=1: a permit kept would hang the next one
                _break_off(open_stream())  # dropped here, in a reference cycle, unclosed
            return 3

        assert _in_thread(previews) == [3]
        until(lambda: gate.stats()["sim"].in_flight == 0)
        assert_idle(gate)


def test_a_dropped_sync_sdk_stream_collected_on_the_loop_thread_does_not_block_it(
    long_answers: tuple[str, SimEngine],
) -> None:
    base_url, _ = long_answers
    with sync_gate(base_url, concurrency=2) as gate:
        open_stream = _opener(gate, base_url, guarded=False)
        blocked_s = _collected_on_the_loop_thread(gate, lambda: _break_off(open_stream()))
        assert blocked_s < 5.0, f"the loop's thread was blocked {blocked_s:.1f}s"
        until(lambda: gate.stats()["sim"].in_flight == 0)
        assert_idle(gate)


def test_a_guarded_sync_stream_kept_unread_past_the_idle_bound_gives_its_permit_back(
    long_answers: tuple[str, SimEngine],
) -> None:
    base_url, _ = long_answers
    with sync_gate(base_url, concurrency=1, idle_timeout=5.0) as gate:
        open_stream = _opener(gate, base_url)

        kept = open_stream()
        first = iter(kept)
        next(first)  # read once, then kept (referenced) and left unread
        # concurrency=1: the next call waits for the kept stream's permit, the idle bound's
        later = _in_thread(lambda: sum(1 for _ in open_stream()))
        assert later and later[0] > 1
        with pytest.raises(gg.RequestTimeout, match="idle bound"):
            for _ in first:
                pass
        until(lambda: gate.stats()["sim"].in_flight == 0)
        assert_idle(gate)


def test_a_gate_stream_broken_off_in_a_cycle_collected_on_the_loop_thread_does_not_block_it(
    long_answers: tuple[str, SimEngine],
) -> None:
    """The same for ``SyncGateway.stream``: a reader broken off mid-answer and left in a
    reference cycle (an exception kept with its traceback, a list holding itself) is closed
    by its finalizer wherever the collector runs. On the loop's own thread, closing waited
    for the hang-up that thread had to run: every call of the process stalled 10 s (the
    bound below is half that: a collection itself took 2.3 s on a machine at load 16)."""
    base_url, _ = long_answers
    with sync_gate(base_url, concurrency=2) as gate:

        def read_a_little() -> None:
            reader = iter(gate.stream(USER, max_tokens=300))
            next(reader)
            cycle: list[Any] = [reader]
            cycle.append(cycle)

        def dropped() -> None:
            read_a_little()
            assert gate.stats()["sim"].in_flight == 1

        blocked_s = _collected_on_the_loop_thread(gate, dropped)
        assert blocked_s < 5.0, f"the loop's thread was blocked {blocked_s:.1f}s"
        until(lambda: gate.stats()["sim"].in_flight == 0)
        assert_idle(gate)


def _collected_on_the_loop_thread(gate: gg.SyncGateway, drop: Callable[[], None]) -> float:
    """Real seconds the loop's thread was held by a cycle collection run there right after
    ``drop()`` left a stream behind (collection held off until then, so it finds it)."""
    gc.disable()
    try:
        drop()
        started = time.monotonic()
        call_on(gate._loop, gc.collect)  # the finalizer runs on the loop's thread
        return time.monotonic() - started
    finally:
        gc.enable()
