"""``gate.map(..., on_result=)``: a long job reports each item as it ends (a progress bar, a
result streamed out), not only as one list at the very end."""

from __future__ import annotations

import pytest

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual, sim_backend

USER = [{"role": "user", "content": "Summarise this ticket in one line."}]


def _items(n: int) -> list[dict[str, object]]:
    return [{"messages": USER, "max_tokens": 40} for _ in range(n)]


async def _job(
    scenario: str, n: int
) -> tuple[list[gg.ChatResult | gg.GateError], list[tuple[int, object, float]], float]:
    clock = LoopClock()
    backend, _ = sim_backend("gpu", name="gpu", clock=clock, seed=2, concurrency=4)
    reported: list[tuple[int, object, float]] = []
    items: list[object] = list(_items(n))
    items[3] = {"messages": "not a list"}  # a bad item ends at once, and is reported too
    async with gg.Gateway([backend], clock=clock, seed=1) as gate:
        start = clock.now()
        results = await gate.map(
            items,  # type: ignore[arg-type]
            scenario=scenario,
            on_result=lambda i, r: reported.append((i, r, clock.now() - start)),
        )
        total = clock.now() - start
    return results, reported, total


@pytest.mark.parametrize("scenario", ["default", "batch_content"])
def test_each_item_is_reported_once_as_it_ends_with_its_outcome(scenario: str) -> None:
    results, reported, total = run_virtual(_job, scenario, 40)
    assert sorted(i for i, _, _ in reported) == list(range(40))  # each item, once
    for index, outcome, _ in reported:
        assert outcome is results[index]  # the very object the list holds
    assert isinstance(results[3], gg.BadRequestError) and "item 3" in str(results[3])
    assert sum(isinstance(r, gg.ChatResult) for r in results) == 39
    # as each ends: at a limit of 4, the first reports come long before the job's end
    times = sorted(t for _, _, t in reported)
    assert times[len(times) // 4] < total / 2
    assert times[-1] == pytest.approx(total)


async def _failing_callback(scenario: str) -> tuple[BaseException | None, int, int]:
    clock = LoopClock()
    backend, engine = sim_backend("gpu", name="gpu", clock=clock, seed=2, concurrency=4)
    seen = 0

    def on_result(index: int, outcome: gg.ChatResult | gg.GateError) -> None:
        nonlocal seen
        seen += 1
        if seen == 5:
            raise KeyError("the progress sink broke")

    raised: BaseException | None = None
    async with gg.Gateway([backend], clock=clock, seed=1) as gate:
        try:
            await gate.map(_items(200), scenario=scenario, on_result=on_result)
        except KeyError as error:
            raised = error
        stats = gate.stats()["gpu"]
        # the calls the job cancelled were at the backend: their slots are held for the grace
        assert stats.in_flight == stats.abandoned_holding == 4 and stats.queued == 0
        await clock.sleep(backend.abandon_grace_s + 0.001)
        assert gate.stats()["gpu"].in_flight == 0
    return raised, seen, engine.ledger.snapshot().requests


@pytest.mark.parametrize("scenario", ["default", "batch_content"])
def test_a_raising_callback_stops_the_job_with_its_exception(scenario: str) -> None:
    raised, seen, sent = run_virtual(_failing_callback, scenario)
    assert isinstance(raised, KeyError)
    assert seen == 5  # not called again once it raised
    assert sent < 50  # the rest of the 200 items were never sent


async def test_on_result_must_be_callable() -> None:
    backend, _ = sim_backend("gpu", name="gpu", clock=gg.ScaledClock(100.0))
    async with gg.Gateway([backend], clock=gg.ScaledClock(100.0)) as gate:
        with pytest.raises(gg.BadRequestError, match="on_result"):
            await gate.map(_items(2), on_result="print")  # type: ignore[arg-type]
