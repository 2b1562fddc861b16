"""A batch item whose parameters are of the wrong JSON type is refused before the upload.

Found by submitting ``{"messages": [...], "temperature": "hot"}``: ``max_tokens="16"`` was
refused already, but ``temperature``, ``top_p``, ``seed``, ``stop``, ``tools`` … of any type
went into the batch file, to be refused by the provider hours later — a line, or at a
provider that validates the whole request set, the whole batch with the good items in it.
Now the job is refused up front with :class:`gg.BatchItemsError`, naming every bad item
and its field at once (``.refused``), with nothing recorded, uploaded or held; the good
items go as a job of their own. A live call refuses the same arguments the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import gptgate as gg
from tests.test_batch import Sim, _run

ASK = [{"role": "user", "content": "q"}]

WRONG: list[tuple[str, Any, str]] = [
    ("temperature", "hot", "temperature must be a number"),
    ("temperature", True, "temperature must be a number"),
    ("top_p", "0.9", "top_p must be a number"),
    ("seed", 1.5, "seed must be an int"),
    ("stop", 5, "stop must be a string or a list of strings"),
    ("stop", ["a", 1], "stop must be a string or a list of strings"),
    ("logprobs", "yes", "logprobs must be a bool"),
    ("tools", {"type": "function"}, "tools must be a list"),
    ("tool_choice", 3, "tool_choice must be a string or a dict"),
    ("user", 42, "user must be a string"),
]


@pytest.mark.parametrize(("field", "value", "says"), WRONG)
def test_a_wrong_typed_parameter_is_refused_before_anything_is_sent(
    tmp_path: Path, field: str, value: Any, says: str
) -> None:
    bad = {"messages": ASK, "max_tokens": 10, field: value}
    items = [{"messages": ASK, "max_tokens": 10}, bad, {"messages": ASK, "max_tokens": 10}]

    async def body(sim: Sim) -> None:
        async with sim.gate(budget=gg.Budget(usd_per_hour=5.0)) as gate:
            with pytest.raises(gg.BadRequestError, match=says) as live:
                await gate.chat(**bad)
            with pytest.raises(gg.BatchItemsError) as batched:
                await gate.batch(items, job_dir=tmp_path)
            status = gate.budget_status()
            assert status is not None and status.reserved_usd == 0
        assert batched.value.message == f"item 1: {live.value.message}"
        assert batched.value.refused == {1: batched.value.message}
        assert isinstance(batched.value, gg.BadRequestError) and not batched.value.retryable
        assert (sim.batches.uploads, sim.batches.creates) == (0, 0)
        assert sim.engine.ledger.snapshot().requests == 0  # the live call was not sent either
        assert not (tmp_path / "job.json").exists()

    _run(body)


def test_every_bad_item_is_named_at_once_and_the_rest_go_as_a_job(tmp_path: Path) -> None:
    good = {"messages": ASK, "max_tokens": 10, "temperature": 0.2}
    items: list[Any] = [dict(good) for _ in range(30)]
    items[3] = {**good, "temperature": "hot"}
    items[7] = {**good, "messages": "not a list"}
    items[20] = {**good, "seed": "42"}

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            with pytest.raises(gg.BatchItemsError) as refused:
                await gate.batch(items, job_dir=tmp_path / "all")
            assert sorted(refused.value.refused) == [3, 7, 20]
            assert "item 3: temperature must be a number" in str(refused.value)
            assert "(and 2 more items refused: 7, 20; see .refused)" in str(refused.value)
            assert "item 7 needs 'messages'" in refused.value.refused[7]
            assert "seed must be an int" in refused.value.refused[20]
            assert (sim.batches.uploads, sim.batches.creates) == (0, 0)
            rest = [it for i, it in enumerate(items) if i not in refused.value.refused]
            job = await gate.batch(rest, job_dir=tmp_path / "rest")
            results = await job.wait()
        assert len(results) == 27 and all(isinstance(r, gg.ChatResult) for r in results)
        assert (sim.batches.uploads, sim.batches.creates) == (1, 1)

    _run(body)
