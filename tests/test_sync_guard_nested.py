"""A sync-guarded function called inside another one on the same backend runs under the
outer call's permit.

``@gate.guard() def answer(): ... summarize() ...`` with ``summarize`` guarded too: each
``answer`` held a permit and waited for a second one for ``summarize``. With the limit's
permits all held by ``answer`` calls (one call at ``concurrency=1``, four at 4), nothing ever
came back: every Flask thread hung, forever without a ``deadline_s``. A guard entered in the
thread of a guarded call of the same gateway, on a backend it may use, is covered by that
call's permit (as an SDK request inside a guarded call is); one on another backend takes a
permit there.
"""

from __future__ import annotations

import threading

import pytest

import gptgate as gg

#: no request is made: the guarded functions below never touch the network
BASE_URL = "http://127.0.0.1:9/v1"


def _gate() -> gg.SyncGateway:
    return gg.SyncGateway(
        [gg.Backend(name="one", base_url=BASE_URL, model="m", concurrency=1),
         gg.Backend(name="two", base_url=BASE_URL, model="m", concurrency=1)],
        deadline_s=30.0,
    )


def test_a_guard_inside_a_guard_on_its_backend_uses_the_outer_permit() -> None:
    with _gate() as gate:

        @gate.guard(backend="one")
        def summarize(text: str) -> str:
            return text.upper()

        @gate.guard(backend="one")
        def answer(question: str) -> str:
            return summarize(question) + "!"

        outcome: list[object] = []
        caller = threading.Thread(target=lambda: outcome.append(answer("why")), daemon=True)
        caller.start()
        caller.join(10)
        assert not caller.is_alive(), "the nested guard waited for the permit its caller holds"
        assert outcome == ["WHY!"]
        stats = gate.stats()["one"]
        assert (stats.in_flight, stats.queued, stats.calls) == (0, 0, 1)


def test_the_inner_functions_error_reaches_the_outer_as_its_own() -> None:
    with _gate() as gate:

        @gate.guard(backend="one")
        def inner() -> str:
            raise ValueError("the application's own")

        @gate.guard(backend="one")
        def outer() -> str:
            return inner()

        with pytest.raises(ValueError, match="application's own"):
            outer()
        assert gate.stats()["one"].in_flight == 0


def test_a_guard_inside_a_guard_on_another_backend_takes_a_permit_there() -> None:
    with _gate() as gate:
        seen: dict[str, int] = {}

        @gate.guard(backend="two")
        def elsewhere() -> str:
            seen["two"] = gate.stats()["two"].in_flight
            return "two"

        @gate.guard(backend="one")
        def outer() -> str:
            return elsewhere()

        assert outer() == "two"
        assert seen == {"two": 1}  # a permit of its own backend's limit
        assert gate.stats()["two"].calls == 1


class _Unavailable(Exception):
    """An SDK's 503: the backend's failure, retryable."""

    status_code = 503


def test_an_inner_failure_on_another_backend_is_retried_there_and_not_again() -> None:
    """The inner guard's policy retries it on its backend; the outer's did it all again
    around it (3 × 3 tries of a dead backend) and counted it as its own backend's failure."""
    gate = gg.SyncGateway(
        [gg.Backend(name="one", base_url=BASE_URL, model="m", concurrency=1),
         gg.Backend(name="two", base_url=BASE_URL, model="m", concurrency=1)],
        deadline_s=30.0, breaker_threshold=50, backoff_base_s=0.001, backoff_cap_s=0.01,
        max_attempts=3,
    )
    with gate:
        runs = {"outer": 0, "inner": 0}

        @gate.guard(backend="two")
        def inner() -> str:
            runs["inner"] += 1
            raise _Unavailable("service unavailable")

        @gate.guard(backend="one")
        def outer() -> str:
            runs["outer"] += 1
            return inner()

        with pytest.raises(_Unavailable):
            outer()
        assert runs == {"outer": 1, "inner": 3}  # was 3 and 9
        assert gate.stats()["one"].failures == 0
