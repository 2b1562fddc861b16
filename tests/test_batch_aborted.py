"""A Batch API item whose answer its server cut off (``finish_reason: "abort"`` or
``"error"``, as a vLLM batch runner sends one under a 200) is a failed item, not a result.

Before: ``job.wait()`` returned the truncated text as a ``ChatResult(finish_reason="abort")``
and ``retry=`` never sent it again. Now it is a retryable ``BackendError`` — the same failed
item a 500 line is, so the job's retry policy sends it again — and its tokens, billed by the
provider, are booked at the batch price."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gptgate as gg
from gptgate.ledger import LedgerEntry
from gptgate.sim import LoopClock, SimBatches, SimBatchPlan, run_virtual
from gptgate.testing import sim_backend

PRICE = gg.Price(input_per_mtok=2.0, output_per_mtok=8.0)
ITEMS = [{"messages": [{"role": "user", "content": "word " * (4 * (i + 1))}], "max_tokens": 40}
         for i in range(200)]


def _job(tmp_path: Path, retry: Any) -> tuple[list[Any], LedgerEntry, SimBatches]:
    async def main() -> tuple[list[Any], LedgerEntry, SimBatches]:
        clock = LoopClock()
        backend, engine = sim_backend("hosted", name="oa", clock=clock, price=PRICE)
        batches = SimBatches(engine, SimBatchPlan(complete_after_s=600, abort_rate=0.1,
                                                  seed=11)).attach()
        async with gg.Gateway([backend], clock=clock) as gate:
            job = await gate.batch(ITEMS, job_dir=tmp_path, retry=retry)
            results = await job.wait()
            return results, gate.ledger.entries["oa"], batches

    return run_virtual(main)


def test_an_aborted_item_is_a_retryable_failure_and_its_tokens_are_booked(
    tmp_path: Path,
) -> None:
    results, entry, batches = _job(tmp_path, None)
    aborted = [r for r in results if isinstance(r, gg.BackendError)]
    ok = [r for r in results if isinstance(r, gg.ChatResult)]
    assert 5 < len(aborted) < 40 and len(ok) + len(aborted) == 200
    assert all(r.retryable and r.billed and 'finish_reason "abort"' in r.message
               for r in aborted)
    assert not any(r.finish_reason == "abort" for r in ok)
    assert entry.calls_failed == len(aborted) and entry.calls_ok == len(ok)
    # every answer the provider billed, the cut ones too, at the provider's own counts
    assert entry.batch_requests == batches.billed_requests == 200
    assert entry.input_tokens == batches.billed_input_tokens
    assert entry.output_tokens == batches.billed_output_tokens


def test_aborted_items_go_again_in_the_jobs_retry_round(tmp_path: Path) -> None:
    results, entry, batches = _job(tmp_path, "batch")
    ok = [r for r in results if isinstance(r, gg.ChatResult)]
    assert batches.creates == 2 and len(ok) >= 195  # a tenth cut, a tenth of those again
    assert not any(r.finish_reason == "abort" for r in ok)
    assert entry.batch_requests == batches.billed_requests > 200
    assert entry.input_tokens == batches.billed_input_tokens

