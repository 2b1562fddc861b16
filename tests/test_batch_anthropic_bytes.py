"""An Anthropic job split at ``max_bytes`` sends create bodies within it: the requests go
inline, wrapped as ``{"requests":[...]}`` and separated by commas, 14 bytes beyond what the
split counted (each line and a newline, as in an OpenAI file). Before, a part filled to the
limit went over it by those 14 bytes, and Anthropic's 413 ``request_too_large`` stopped the
submission part-way (its intent recorded, its first part refused)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import gptgate as gg
from gptgate.sim import ANTHROPIC_PROFILE, LoopClock, SimBatchPlan, SimMessageBatches, run_virtual
from gptgate.testing import sim_backend

CLAUDE = gg.Price(input_per_mtok=3.0, output_per_mtok=15.0)


def _items(n: int) -> list[dict[str, Any]]:
    """Items whose request lines are all the same length (one-digit custom ids)."""
    return [{"messages": [{"role": "user", "content": f"ticket {i} " * 20}], "max_tokens": 40}
            for i in range(n)]


def test_parts_filled_to_max_bytes_are_created_within_it(tmp_path: Path) -> None:
    async def main() -> None:
        clock = LoopClock()
        profile = ANTHROPIC_PROFILE.model_copy(update={"rpm": None, "tpm": None,
                                                        "max_queue": None})
        backend, engine = sim_backend(
            profile, name="claude", clock=clock, seed=7, provider="anthropic",
            base_url="http://127.0.0.1:8000", api_key="sk-ant-test", price=CLAUDE,
        )
        plan = SimBatchPlan(complete_after_s=60)
        batches = SimMessageBatches(engine, plan).attach()  # type: ignore[arg-type]
        async with gg.Gateway([backend], clock=clock) as gate:
            job = await gate.batch(_items(1), job_dir=tmp_path / "probe")
            await job.wait()
            sent = next(iter(batches.batches.values())).requests[0]
            line = len(json.dumps(sent, separators=(",", ":")))
            # three lines and their separators fill a part exactly, as the split counts
            limit = 3 * (line + 1)
            batches.plan = replace(plan, max_batch_bytes=limit)
            limits = gg.BatchLimits(max_requests=1_000, max_bytes=limit)
            job = await gate.batch(_items(9), job_dir=tmp_path / "job", limits=limits)
            results = await job.wait()
        assert all(isinstance(r, gg.ChatResult) for r in results), results[:2]
        assert job.status == "completed" and batches.creates == 1 + len(job.batch_ids)
        for created in list(batches.batches.values())[1:]:
            body = b'{"requests":[' + b",".join(
                json.dumps(r, separators=(",", ":")).encode() for r in created.requests
            ) + b"]}"
            assert len(body) <= limit

    run_virtual(main)
