"""A stream a guarded *sync* function returns — a plain generator, or an iterator class of the
application's own — that its caller closes (or drops) before its end counts for nothing
towards the backend's circuit, as the stream-cut rule says (gptgate/stream_cut.py): the
caller's leaving is no failure, and no success either, so it does not reset a run of the
backend's failures. Read to its end, it is a success as before.

Before, such a stream closed early was a success: with ``breaker_threshold=3``, fail, left,
fail, left, fail left the circuit closed (the run was reset twice) — an SDK's event stream on
the same guard already counted nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import pytest

import gptgate as gg
from tests.streamserver import BASE_URL

THRESHOLD = 3


class Chunks:
    """An iterator class of the application's own, with ``close``."""

    def __init__(self) -> None:
        self._left = 5
        self.closed = False

    def __iter__(self) -> Chunks:
        return self

    def __next__(self) -> str:
        if self._left == 0:
            raise StopIteration
        self._left -= 1
        return "piece"

    def close(self) -> None:
        self.closed = True


def _generator() -> Iterator[str]:
    yield from ["piece"] * 5


MAKERS: dict[str, Callable[[], Any]] = {"generator": _generator, "iterator class": Chunks}


def _gate() -> gg.SyncGateway:
    backend = gg.Backend(
        name="b", base_url=BASE_URL, model="m", concurrency=2,
        transport=httpx2.MockTransport(lambda request: httpx2.Response(500)),
    )
    return gg.SyncGateway([backend], breaker_threshold=THRESHOLD, breaker_cooldown_s=600.0,
                          max_attempts=1)


def _guarded(gate: gg.SyncGateway, make: Callable[[], Any]) -> Callable[[bool], Any]:
    @gate.guard(backend="b")
    def answer(fail: bool) -> Any:
        if fail:
            raise gg.BackendError("the backend failed", backend="b")
        return make()

    return answer


def _settled(gate: gg.SyncGateway) -> None:
    """The loop has ended the last guarded call (the stream's end reaches it from the
    caller's thread): its permit is back."""
    until = time.monotonic() + 10.0
    while gate.stats()["b"].in_flight and time.monotonic() < until:
        time.sleep(0.01)
    assert gate.stats()["b"].in_flight == 0


def _leave(stream: Any) -> None:
    for _ in stream:
        break  # the caller read one piece and left
    stream.close()


@pytest.mark.parametrize("kind", MAKERS)
def test_a_returned_stream_its_caller_leaves_does_not_reset_a_run_of_failures(kind: str) -> None:
    with _gate() as gate:
        answer = _guarded(gate, MAKERS[kind])
        for i in range(2 * THRESHOLD - 1):
            if i % 2:
                _leave(answer(False))
                _settled(gate)
            else:
                with pytest.raises(gg.BackendError):
                    answer(True)
        breaker = gate.gateway.backend_state("b").breaker
        stats = gate.stats()["b"]
    assert (stats.failures, stats.circuit, breaker.failures) == (THRESHOLD, "open", THRESHOLD)


@pytest.mark.parametrize("kind", MAKERS)
def test_a_returned_stream_read_to_its_end_is_a_success(kind: str) -> None:
    with _gate() as gate:
        answer = _guarded(gate, MAKERS[kind])
        with pytest.raises(gg.BackendError):
            answer(True)
        assert list(answer(False)) == ["piece"] * 5
        _settled(gate)
        breaker = gate.gateway.backend_state("b").breaker
        assert (breaker.failures, gate.stats()["b"].circuit) == (0, "closed")
