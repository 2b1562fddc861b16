"""An item carrying its own ``custom_id`` (a user moving from hand-written Batch API lines,
labelling items ``ticket-17``) is refused before anything is uploaded, on OpenAI and
Anthropic. gptgate numbers the requests itself (results come back in input order), so the
item's ``custom_id`` went into the request body as a chat parameter — which OpenAI answers
with a 400 ("Unrecognized request argument supplied: custom_id") and Anthropic with "Extra
inputs are not permitted": every item failed, hours later, once the batch had run."""

from __future__ import annotations

from pathlib import Path

import pytest

import gptgate as gg
from tests.test_batch import Sim, _run
from tests.test_batch_providers import Claude, _claude


def _labelled(n: int) -> list[dict[str, object]]:
    return [{"custom_id": f"ticket-{i}", "messages": [{"role": "user", "content": f"q{i}"}],
             "max_tokens": 10} for i in range(n)]


def test_an_openai_item_with_a_custom_id_is_refused_before_the_upload(tmp_path: Path) -> None:
    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            with pytest.raises(gg.BadRequestError, match="item 0: custom_id"):
                await gate.batch(_labelled(3), job_dir=tmp_path)
        assert (sim.batches.uploads, sim.batches.creates) == (0, 0)
        assert not (tmp_path / "job.json").exists()

    _run(body)


def test_an_anthropic_item_with_a_custom_id_is_refused_before_the_create(
    tmp_path: Path,
) -> None:
    async def body(sim: Claude) -> None:
        async with sim.gate() as gate:
            with pytest.raises(gg.BadRequestError, match="item 0: custom_id"):
                await gate.batch(_labelled(3), job_dir=tmp_path)
        assert sim.batches.creates == 0

    _claude(body)
