"""``gate.embed`` under a dollar budget (``budget=gg.Budget(...)``).

Two things a user of both features met:

* an embedding request the budget refused surfaced as ``RateLimitedError`` (the local 429 an
  SDK on ``gate.http_client`` is answered with), not the ``BudgetExceededError`` that
  docs/budget.md promises for every refusal — a caller catching it to back off never did;
* merging: callers that each fit the budget alone were merged into one request dearer than
  the whole hourly budget, which is refused in either mode — so every caller failed, though
  sent alone each would have been admitted (with ``throttle``: paced through the hour);
* the merged request's refusal was counted in ``budget_status().raised`` on top of each
  caller's (22 for 21 refused callers), and the refusal advised "lower max_tokens", which an
  embedding request has none of;
* with ``throttle``, a merged request that waited counted one in ``budget_status().throttled``
  for its N callers, and a caller split from it after a refusal was counted again when it
  waited alone (5 for 4 callers).
"""

from __future__ import annotations

from typing import Any

import anyio

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual, sim_backend

PRICE = gg.Price(input_per_mtok=2.0, output_per_mtok=8.0)


def _gate(clock: LoopClock, budget: gg.Budget) -> tuple[gg.Gateway, Any]:
    backend, engine = sim_backend(
        "gpu", name="sim", clock=clock, seed=1, price=PRICE,
        embedding_model="text-embedding-3-small",
    )
    return gg.Gateway([backend], clock=clock, seed=1, budget=budget), engine


async def _one_embed_dearer_than_the_budget() -> dict[str, Any]:
    clock = LoopClock()
    gate, engine = _gate(clock, gg.Budget(usd_per_hour=0.001, on_exceed="raise"))
    async with gate:
        try:
            await gate.embed(["a long passage " * 400] * 4)
        except gg.GateError as error:
            caught: gg.GateError = error
        return {"error": caught, "sent": engine.ledger.snapshot().requests,
                "status": gate.budget_status(), "stats": gate.stats()["sim"]}


def test_an_embed_the_budget_refuses_raises_budget_exceeded() -> None:
    out = run_virtual(_one_embed_dearer_than_the_budget)
    error = out["error"]
    assert isinstance(error, gg.BudgetExceededError), repr(error)  # was RateLimitedError
    assert error.budget_usd == 0.001
    # advice an embedding can follow: it has no max_tokens to lower
    assert "max_tokens" not in error.message and "fewer or shorter texts" in error.message
    assert out["status"].raised == 1
    assert out["sent"] == 0 and out["status"].spent_usd == 0.0
    stats = out["stats"]
    assert stats.rate_limited == 0 and stats.failures == 0 and stats.circuit == "closed"


async def _callers_merged_past_the_budget(on_exceed: str) -> dict[str, Any]:
    clock = LoopClock()
    # each caller's text costs ~$0.0009 to embed: one fits the $0.005 hour, thirty together not
    budget = gg.Budget(usd_per_hour=0.005, on_exceed=on_exceed, burst_s=3600)  # type: ignore[arg-type]
    gate, engine = _gate(clock, budget)
    outcomes: list[object] = []
    async with gate:

        async def one(i: int) -> None:
            try:
                outcomes.append(await gate.embed(f"passage {i} " * 300))
            except gg.GateError as error:
                outcomes.append(error)

        async with anyio.create_task_group() as group:
            for i in range(30):
                group.start_soon(one, i)
        return {"outcomes": outcomes, "status": gate.budget_status(),
                "sent": engine.ledger.snapshot().requests}


def test_merged_callers_dearer_together_than_the_budget_are_sent_apart_when_throttled() -> None:
    out = run_virtual(_callers_merged_past_the_budget, "throttle")
    vectors = [o for o in out["outcomes"] if isinstance(o, list)]
    assert len(vectors) == 30, out["outcomes"][:3]  # before: 30 refused, none sent
    assert out["status"].reserved_usd == 0.0


def test_merged_callers_under_raise_get_what_the_budget_has_room_for() -> None:
    out = run_virtual(_callers_merged_past_the_budget, "raise")
    outcomes = out["outcomes"]
    served = sum(isinstance(o, list) for o in outcomes)
    refused = [o for o in outcomes if not isinstance(o, list)]
    assert served >= 3  # before: 0 — the merged request was dearer than the whole hour
    assert all(isinstance(o, gg.BudgetExceededError) for o in refused), refused[:1]
    assert refused  # the hour's room ran out
    # each refused caller counted once: not the merged request they were split from too
    assert out["status"].raised == len(refused)
    assert out["status"].spent_usd <= 0.005 and out["status"].reserved_usd == 0.0


async def _merged_callers_wait(timeout: float | None) -> dict[str, Any]:
    clock = LoopClock()
    # four callers' texts (~$0.0015 each) fit the $0.01 hour together, but not — nor one of
    # them — beside the six an earlier call spent: their merged request waits for that spend
    # to leave the hour
    budget = gg.Budget(usd_per_hour=0.01, burst_s=3600)
    gate, engine = _gate(clock, budget)
    outcomes: list[object] = []
    async with gate:
        await gate.embed([f"earlier {i} " * 300 for i in range(6)])

        async def one(i: int) -> None:
            try:
                outcomes.append(await gate.embed(f"passage {i} " * 300, timeout=timeout))
            except gg.GateError as error:
                outcomes.append(error)

        async with anyio.create_task_group() as group:
            for i in range(4):
                group.start_soon(one, i)
        return {"outcomes": outcomes, "status": gate.budget_status(),
                "sent": engine.ledger.snapshot().requests}


def test_a_merged_request_that_waits_counts_each_of_its_callers_throttled() -> None:
    out = run_virtual(_merged_callers_wait, None)
    assert all(isinstance(o, list) for o in out["outcomes"]), out["outcomes"][:1]
    assert out["sent"] == 2  # the earlier call's request, then the four callers' merged one
    # four callers waited in one merged request: four throttled, as four alone would be
    assert out["status"].throttled == 4  # before: 1
    assert out["status"].raised == 0


def test_callers_split_from_a_merged_request_that_waited_are_not_counted_twice() -> None:
    # room comes back in an hour, past the callers' 60 s deadline: the merged request waits,
    # is refused, and each caller is sent alone, to wait and be refused again
    out = run_virtual(_merged_callers_wait, 60.0)
    refused = out["outcomes"]
    assert len(refused) == 4 and out["sent"] == 1  # only the earlier call's
    assert all(isinstance(o, gg.BudgetExceededError) for o in refused), refused[:1]
    assert out["status"].throttled == 4  # before: 5 (the merged request, then each caller)
    assert out["status"].raised == 4
