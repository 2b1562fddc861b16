"""A batch job and the response cache (gptgate/batch_cache.py): the batch's answers are stored
under the key a live call of the same request has, so ``gate.chat`` is served from the cache
afterwards; an item whose answer is cached is answered from it and not sent — also after a
process resumes the job. Over the simulator's Batch API in virtual time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import gptgate as gg
from tests.test_batch import Sim, _items, _run


def _deterministic(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{**item, "temperature": 0} for item in _items(n, start)]


def _sent_items(sim: Sim) -> int:
    """Requests the simulator's Batch API received in its batches (its bill's requests)."""
    return int(sim.batches.billed_requests)


def test_batch_answers_serve_later_live_calls_from_the_cache(tmp_path: Path) -> None:
    """Ten deterministic items through the batch: the same ten ``gate.chat`` calls afterwards
    are all hits ($0, no request), each with the batch's own answer."""

    async def body(sim: Sim) -> None:
        cache = gg.ResponseCache()
        async with sim.gate(response_cache=cache) as gate:
            items = _deterministic(10)
            job = await gate.batch(items, backend="oa", job_dir=tmp_path / "job")
            results = await job.wait()
            assert all(isinstance(r, gg.ChatResult) for r in results)
            requests = sim.engine.ledger.snapshot().requests
            live = [await gate.chat(**item) for item in items]
            assert sim.engine.ledger.snapshot().requests == requests  # nothing sent
            assert all(r.from_cache and r.cost_usd == 0 for r in live)
            assert [r.text for r in live] == [r.text for r in results]  # type: ignore[union-attr]
            stats = cache.statistics()
            assert (stats.stored, stats.hits) == (10, 10)
            assert gate.ledger.entries["oa"].response_cache_hits == 10

    _run(body)


def test_cached_items_are_answered_from_the_cache_and_not_sent(tmp_path: Path) -> None:
    """Four of ten items asked live before: the batch carries the other six, the four come
    back as cache hits at $0, and the job's results are in input order."""

    async def body(sim: Sim) -> None:
        async with sim.gate(response_cache=gg.ResponseCache()) as gate:
            items = _deterministic(10)
            earlier = {i: await gate.chat(**items[i]) for i in (0, 3, 4, 9)}
            job = await gate.batch(items, backend="oa", job_dir=tmp_path / "job")
            results = await job.wait()
            assert _sent_items(sim) == 6
            for i, result in enumerate(results):
                assert isinstance(result, gg.ChatResult)
                if i in earlier:
                    assert result.from_cache and result.cost_usd == 0
                    assert result.text == earlier[i].text
                else:
                    assert not result.from_cache and result.scenario == "batch"
            sizes = [r.usage.input_tokens for r in results]  # type: ignore[union-attr]
            assert sizes == sorted(sizes)  # each answers its own prompt
            entry = gate.ledger.entries["oa"]
            assert entry.batch_requests == 6 and entry.response_cache_hits == 4

    _run(body)


def test_a_job_answered_entirely_from_the_cache_sends_nothing(tmp_path: Path) -> None:
    async def body(sim: Sim) -> None:
        async with sim.gate(response_cache=gg.ResponseCache()) as gate:
            items = _deterministic(3)
            for item in items:
                await gate.chat(**item)
            job = await gate.batch(items, backend="oa", job_dir=tmp_path / "job")
            results = await job.wait()
            assert (sim.batches.creates, sim.batches.uploads) == (0, 0)
            assert job.status == "completed" and job.counts == gg.BatchCounts(3, 3, 0)
            assert all(isinstance(r, gg.ChatResult) and r.from_cache for r in results)

    _run(body)


def test_a_resumed_job_returns_the_cached_answers_without_the_cache(tmp_path: Path) -> None:
    """The process that submitted the job dies; the next one (its memory cache empty) takes
    it up: same job, the same six requests sent once, the four cached answers kept in
    ``job_dir``."""

    async def body(sim: Sim) -> None:
        items = _deterministic(10)
        async with sim.gate(response_cache=gg.ResponseCache()) as gate:
            for i in (0, 3, 4, 9):
                await gate.chat(**items[i])
            first = await gate.batch(items, backend="oa", job_dir=tmp_path / "job")
            assert not first.resumed
        async with sim.gate(response_cache=gg.ResponseCache()) as gate:
            job = await gate.batch(items, backend="oa", job_dir=tmp_path / "job")
            assert job.resumed
            results = await job.wait()
        assert sim.batches.creates == 1 and _sent_items(sim) == 6
        assert [i for i, r in enumerate(results) if r.from_cache] == [0, 3, 4, 9]  # type: ignore[union-attr]
        record = json.loads((tmp_path / "job" / "job.json").read_text())
        assert record["items"] == 10

    _run(body)


def test_refresh_sends_and_bypass_neither_reads_nor_writes(tmp_path: Path) -> None:
    async def body(sim: Sim) -> None:
        cache = gg.ResponseCache()
        async with sim.gate(response_cache=cache) as gate:
            items = _deterministic(2)
            for item in items:
                await gate.chat(**item)
            marked = [{**items[0], "cache": "refresh"}, {**items[1], "cache": "bypass"}]
            job = await gate.batch(marked, backend="oa", job_dir=tmp_path / "job")
            results = await job.wait()
            assert _sent_items(sim) == 2 and not any(r.from_cache for r in results)  # type: ignore[union-attr]
            assert cache.statistics().stored == 3  # 2 live, then the refreshed one

    _run(body)


def test_sampled_items_are_neither_read_nor_stored(tmp_path: Path) -> None:
    async def body(sim: Sim) -> None:
        cache = gg.ResponseCache()
        async with sim.gate(response_cache=cache) as gate:
            job = await gate.batch(_items(3), backend="oa", job_dir=tmp_path / "job")
            await job.wait()
            assert cache.statistics().stored == 0

    _run(body)


def test_cache_use_without_a_response_cache_names_the_item(tmp_path: Path) -> None:
    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            items = [*_items(1), {**_items(1)[0], "cache": "use"}]
            with pytest.raises(gg.BadRequestError, match="item 1: cache='use' needs"):
                await gate.batch(items, backend="oa", job_dir=tmp_path / "job")
        assert sim.batches.creates == 0

    _run(body)


def test_a_job_refused_before_its_record_leaves_no_answers_for_the_next_job(
    tmp_path: Path,
) -> None:
    """The cached answers are kept in ``job_dir`` before the intent is recorded; a job refused
    in between (here by the dollar budget) recorded nothing, so ``job_dir`` holds no job. The
    next job there — other items — must answer its own items: before, a ``retry="live"`` job
    took the refused job's kept answers for its own items of the same index (wrong answers,
    marked cached, and the batch's real ones neither returned nor booked)."""

    async def body(sim: Sim) -> None:
        cache = gg.ResponseCache()
        refused = _deterministic(4)
        async with sim.gate(response_cache=cache) as gate:
            for item in refused:
                await gate.chat(**item)
        tiny = gg.Budget(usd_per_hour=1e-9, on_exceed="raise")
        async with sim.gate(response_cache=cache, budget=tiny) as gate:
            with pytest.raises(gg.BudgetExceededError):
                await gate.batch([*refused, *_deterministic(4, start=50)], backend="oa",
                                 job_dir=tmp_path / "job")
        assert sim.batches.creates == 0
        items = _deterministic(4, start=10)
        async with sim.gate() as gate:
            job = await gate.batch(items, backend="oa", job_dir=tmp_path / "job", retry="live")
            assert not job.resumed
            results = await job.wait()
            entry = gate.ledger.entries["oa"]
        assert _sent_items(sim) == 4
        assert not any(r.from_cache for r in results)  # type: ignore[union-attr]
        mine = [await _prompt_tokens(sim, item) for item in items]
        assert [r.usage.input_tokens for r in results] == mine  # type: ignore[union-attr]
        assert entry.batch_requests == 4 and entry.batch_cost_usd > 0

    _run(body)


async def _prompt_tokens(sim: Sim, item: dict[str, Any]) -> int:
    """The input tokens the simulator counts for ``item`` (asked live, uncached)."""
    async with sim.gate() as gate:
        return (await gate.chat(**item)).usage.input_tokens
