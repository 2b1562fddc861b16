"""A batch item is checked as the same ``gate.chat`` call is, before anything is uploaded.

Found by submitting ``{"messages": [...], "max_tokens": "5"}`` with ``gptgate batch submit``:
``gate.chat`` refuses it (``BadRequestError``), but the batch was uploaded and created, and
the simulator answered 143 tokens past the intended cap — a provider answers such a line with
a 400 for every item, hours later, once the batch has run. So were a role that is no role, a
message without content, ``n="2"``, a gptgate option (``concurrency=``) and a Responses API
parameter (``max_output_tokens=``): batch items had a looser check of their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import gptgate as gg
from tests.test_batch import Sim, _run

ASK = [{"role": "user", "content": "q"}]

BAD_ITEMS: list[tuple[dict[str, Any], str]] = [
    ({"messages": ASK, "max_tokens": "5"}, "max_tokens must be an int"),
    ({"messages": ASK, "max_completion_tokens": True}, "max_completion_tokens must be an int"),
    ({"messages": [{"role": "usr", "content": "q"}]}, r"messages\[0\].role must be one of"),
    ({"messages": [{"role": "user"}]}, r"messages\[0\] has no content"),
    ({"messages": [{"role": "user", "content": []}]}, r"messages\[0\].content must not be an"),
    ({"messages": ASK, "n": "2"}, "n must be an int"),
    ({"messages": ASK, "concurrency": 4}, "'concurrency' is a gptgate option"),
    ({"messages": ASK, "max_output_tokens": 5}, "'max_output_tokens' is a Responses API"),
]


@pytest.mark.parametrize(("bad", "says"), BAD_ITEMS)
def test_an_item_a_live_call_refuses_is_refused_before_the_upload(
    tmp_path: Path, bad: dict[str, Any], says: str
) -> None:
    items = [{"messages": ASK, "max_tokens": 10}, bad]

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            with pytest.raises(gg.BadRequestError) as live:
                await gate.chat(**bad)
            with pytest.raises(gg.BadRequestError, match=f"item 1: {says}") as batched:
                await gate.batch(items, job_dir=tmp_path)
        assert batched.value.message == f"item 1: {live.value.message}"
        assert (sim.batches.uploads, sim.batches.creates) == (0, 0)
        assert not (tmp_path / "job.json").exists()

    _run(body)
