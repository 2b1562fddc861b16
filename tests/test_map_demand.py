"""What an adaptive limit under a rate limit is told of the work ahead of it: the calls
waiting or in flight, and what ``gate.map`` jobs over sized iterables have yet to pull
(gptgate/map_demand.py; issue 31, round 13). Several jobs at once add up; a job of unknown
length (a generator) makes it unknown. Virtual time, family draw 83's server (281 RPM)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio

import gptgate as gg
from gptgate.limits import LLMLimit
from gptgate.map_demand import MapBacklog
from gptgate.sim import LoopClock, family, run_virtual
from gptgate.testing import sim_backend


def test_the_backlog_sums_sized_jobs_and_is_unknown_with_an_unsized_one() -> None:
    backlog = MapBacklog()
    assert backlog.ahead() is None  # no job: plain calls say nothing of what follows them
    with backlog.job([1, 2, 3]) as first:
        assert backlog.ahead() == 3
        first.pulled()
        with backlog.job(range(10)) as second:
            second.pulled()
            assert backlog.ahead() == 2 + 9
            with backlog.job(x for x in "ab"):
                assert backlog.ahead() is None
            assert backlog.ahead() == 11
        assert backlog.ahead() == 2
        for _ in range(5):  # an iterable yielding more than its len() says: never below 0
            first.pulled()
        assert backlog.ahead() == 0
    assert backlog.ahead() is None


class _Broken:
    def __len__(self) -> int:
        raise RuntimeError("no length")

    def __iter__(self) -> Iterator[int]:
        return iter(())


def test_a_failing_len_only_loses_the_hint() -> None:
    backlog = MapBacklog()
    with backlog.job(_Broken()):
        assert backlog.ahead() is None


class _Recording(LLMLimit):
    """An ``LLMLimit`` that keeps each budget report's ``(demand, ahead)``."""

    def __init__(self) -> None:
        super().__init__(initial=4, max_limit=128)
        self.reports: list[tuple[int, int | None]] = []

    def set_rate_budget(
        self,
        calls: float | None,
        *,
        demand: int = 0,
        spilled: float = 0.0,
        ahead: int | None = None,
    ) -> None:
        self.reports.append((demand, ahead))
        super().set_rate_budget(calls, demand=demand, spilled=spilled, ahead=ahead)


def _items(n: int, tag: str) -> list[dict[str, Any]]:
    return [
        {"messages": [{"role": "user", "content": f"{tag} {i}"}], "max_tokens": 20}
        for i in range(n)
    ]


async def _run(jobs: list[tuple[str, int, bool]]) -> list[tuple[int, int | None]]:
    """Run ``(tag, calls, sized)`` map jobs at once (5 items pulled ahead each) on draw 83's
    server; the reports the limit got."""
    server = family(83)
    assert server.rpm is not None
    clock = LoopClock()
    backend, _ = sim_backend(
        server, name="s", clock=clock, seed=83, concurrency="auto", max_concurrency=128
    )
    limit = _Recording()
    async with gg.Gateway([backend], clock=clock, seed=83) as gate:
        gate.backend_state("s").limiter.limit = limit

        async def one(tag: str, n: int, sized: bool) -> None:
            items = _items(n, tag)
            source = items if sized else (item for item in items)
            results = await gate.map(source, max_pending=5)
            assert all(isinstance(r, gg.ChatResult) for r in results)

        async with anyio.create_task_group() as tg:
            for tag, n, sized in jobs:
                tg.start_soon(one, tag, n, sized)
        await gate.chat([{"role": "user", "content": "after"}], max_tokens=20)
    return limit.reports


def test_a_sized_map_tells_the_limit_the_calls_it_has_yet_to_pull() -> None:
    reports = run_virtual(_run, [("a", 40, True)])
    # the first answer: 5 pulled (look-ahead 5), 35 to come — the whole job in sight
    assert reports[0] == (5, 35)
    assert all(ahead is not None and demand + ahead <= 40 for demand, ahead in reports[:-1])
    assert [ahead for _, ahead in reports[:-1]] == sorted(
        (a for _, a in reports[:-1]), key=lambda a: -(a or 0)
    )  # counts down as the job is pulled
    assert reports[-1] == (1, None)  # a plain call after it: nothing known of what follows


def test_maps_at_once_add_up() -> None:
    reports = run_virtual(_run, [("a", 30, True), ("b", 20, True)])
    assert reports[0] == (10, 25 + 15)  # both jobs' unsent items, not the last map's


def test_a_map_of_unknown_length_makes_the_work_ahead_unknown() -> None:
    assert all(a is None for _, a in run_virtual(_run, [("a", 20, False)]))
    mixed = run_virtual(_run, [("a", 30, True), ("b", 20, False)])
    assert mixed[0] == (10, None)
