"""A batch part OpenAI fails at validation for its organisation's *enqueued token limit* —
the commonest way a large job's part fails — ends in a retryable ``RateLimitedError``, so
``retry="batch"`` sends its items again once the job's other parts have ended (and their
tokens left the queue).

Before, such a part's items ended in ``BadRequestError`` (not retryable): ``retry="batch"``
left them failed, and the same ``job_dir`` resumed only collected the same failures, so
getting them answered at the batch price meant a new job — paying again for every part
that had succeeded.
"""

from __future__ import annotations

from pathlib import Path

import gptgate as gg
from gptgate.sim import SimBatchPlan
from gptgate.tokens import estimate_prompt_tokens

from .test_batch import Sim, _in_order, _items, _run

LIMITS = gg.BatchLimits(max_requests=10, max_bytes=10**9)


def _tokens(items: list[dict[str, object]]) -> int:
    return sum(estimate_prompt_tokens(item["messages"]) for item in items)  # type: ignore[arg-type]


def test_a_part_over_the_enqueued_token_limit_is_retried_as_a_batch(tmp_path: Path) -> None:
    items = _items(30)
    # the first two parts fit in the queue at once, and the third alone; not all three
    limit = max(_tokens(items[:20]), _tokens(items[20:]))
    assert _tokens(items) > limit

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            job = await gate.batch(items, job_dir=tmp_path, limits=LIMITS, retry="batch")
            results = await job.wait()
        _in_order(results)
        assert sim.batches.creates == 4  # three parts, then the refused one again
        assert job.counts == gg.BatchCounts(30, 30, 0)
        # every item answered: the refused part's items were answered by the second round
        assert job.status == "completed"

    _run(body, SimBatchPlan(complete_after_s=600, enqueued_token_limit=limit))


def test_without_retry_the_refused_items_are_retryable_rate_limits(tmp_path: Path) -> None:
    items = _items(30)
    limit = max(_tokens(items[:20]), _tokens(items[20:]))

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            job = await gate.batch(items, job_dir=tmp_path, limits=LIMITS)
            results = await job.wait()
        assert all(isinstance(r, gg.ChatResult) for r in results[:20])
        refused = results[20:]
        assert all(isinstance(r, gg.RateLimitedError) and r.retryable for r in refused), refused
        assert "token_limit_exceeded" in str(refused[0])
        assert job.status == "failed"

    _run(body, SimBatchPlan(complete_after_s=600, enqueued_token_limit=limit))


def test_a_settled_job_resumed_with_retry_books_the_new_rounds_answers(tmp_path: Path) -> None:
    """The job ended with its refused part failed (no ``retry``), and was booked. Taken up
    again with ``retry="batch"`` it sends those items in a second round — whose answers the
    ledger never booked: the job was marked settled, so nothing more was. Only the first
    round's answers stay unbooked the second time."""
    items = _items(30)
    limit = max(_tokens(items[:20]), _tokens(items[20:]))

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            first = await (await gate.batch(items, job_dir=tmp_path, limits=LIMITS)).wait()
            booked = gate.ledger.entries["oa"].batch_requests
        assert booked == 20 and sum(isinstance(r, gg.ChatResult) for r in first) == 20
        async with sim.gate() as gate:  # the next run, asking for the failures again
            job = await gate.batch(items, job_dir=tmp_path, limits=LIMITS, retry="batch")
            results = await job.wait()
            entry = gate.ledger.entries["oa"]
        _in_order(results)
        assert sim.batches.creates == 4
        assert entry.batch_requests == 10 == sim.batches.billed_requests - booked
        assert entry.batch_cost_usd > 0

    _run(body, SimBatchPlan(complete_after_s=600, enqueued_token_limit=limit))
