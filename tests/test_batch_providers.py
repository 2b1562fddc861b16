"""``gate.batch`` beyond OpenAI (issue 34): Azure's Batch API at its deployment paths, and
Anthropic's Message Batches — bodies built by the backend's dialect, results in input order,
crash-resume without a second create, failures typed, the ledger at the batch price."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import gptgate as gg
from gptgate.batch_anthropic import AnthropicBatches, BatchLookupError
from gptgate.sim import (
    ANTHROPIC_PROFILE,
    LoopClock,
    SimBatches,
    SimBatchPlan,
    SimEngine,
    SimMessageBatches,
    run_virtual,
)
from gptgate.sim.anthropic import AnthropicEngine
from gptgate.sim.profiles import get_profile
from gptgate.testing import sim_backend

KEY = "azure-key-0123456789abcdef"
#: Sonnet's prices, with Anthropic's cache multipliers (writes 1.25×, reads 0.1× input)
CLAUDE = gg.Price(input_per_mtok=3.0, output_per_mtok=15.0, cached_input_per_mtok=0.3,
                  cache_write_per_mtok=3.75)


def _items(n: int) -> list[dict[str, Any]]:
    """Prompts that grow with the index: a result's input tokens say which item it answers."""
    return [
        {"messages": [{"role": "user", "content": "word " * (4 * (i + 1))}], "max_tokens": 40}
        for i in range(n)
    ]


def _in_order(results: list[Any]) -> None:
    assert all(isinstance(r, gg.ChatResult) for r in results), [
        r for r in results if not isinstance(r, gg.ChatResult)
    ][:3]
    sizes = [r.usage.input_tokens for r in results]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)


# -- Azure ----------------------------------------------------------------------------------


@pytest.mark.parametrize("deployment", [True, False], ids=["deployments-api", "v1-api"])
def test_an_azure_job_goes_through_azures_batch_paths(tmp_path: Path, deployment: bool) -> None:
    async def main() -> None:
        clock = LoopClock()
        profile = get_profile("gpu").model_copy(update={
            "flavor": "azure", "api_key": KEY, "rpm": None, "tpm": None, "max_queue": None})
        options: dict[str, Any] = {"deployment": profile.model} if deployment else {}
        backend, engine = sim_backend(
            profile, name="az", clock=clock, provider="azure", base_url="http://127.0.0.1:8000",
            api_key=KEY, model="gpt-4o", **options)
        batches = SimBatches(engine, SimBatchPlan(complete_after_s=300)).attach()
        async with gg.Gateway([backend], clock=clock) as gate:
            job = await gate.batch(_items(60), job_dir=tmp_path / "az", poll_s=30)
            _in_order(await job.wait())
        assert (batches.creates, batches.uploads) == (1, 1)
        sent = next(f for f in batches.files.values() if f.purpose == "batch")
        line = json.loads(sent.data.splitlines()[0])
        assert line["url"] == "/chat/completions"  # Azure's endpoint, not OpenAI's /v1/...
        # a Global-Batch deployment is named as the model; the v1 API takes the model
        assert line["body"]["model"] == (profile.model if deployment else "gpt-4o")

    run_virtual(main)


# -- Anthropic ------------------------------------------------------------------------------


class Claude:
    """One simulated Anthropic (engine + Message Batches) outliving the gateways using it."""

    def __init__(self, plan: SimBatchPlan | None = None, **backend: Any) -> None:
        self.clock = LoopClock()
        profile = ANTHROPIC_PROFILE.model_copy(update={"rpm": None, "tpm": None,
                                                        "max_queue": None})
        options = {"provider": "anthropic", "base_url": "http://127.0.0.1:8000",
                   "api_key": "sk-ant-test", "price": CLAUDE, **backend}
        self.backend, engine = sim_backend(profile, name="claude", clock=self.clock, seed=7,
                                           **options)
        assert isinstance(engine, AnthropicEngine)
        self.engine: SimEngine = engine
        self.batches = SimMessageBatches(
            engine, plan or SimBatchPlan(complete_after_s=600)).attach()

    def gate(self) -> gg.Gateway:
        return gg.Gateway([self.backend], clock=self.clock)


def _claude(
    body: Callable[[Claude], Awaitable[Any]], plan: SimBatchPlan | None = None, **backend: Any
) -> Any:
    async def main() -> Any:
        return await body(Claude(plan, **backend))

    return run_virtual(main)


def test_an_anthropic_job_round_trips_in_input_order(tmp_path: Path) -> None:
    async def body(sim: Claude) -> None:
        async with sim.gate() as gate:
            job = await gate.batch(_items(300), job_dir=tmp_path, poll_s=30)
            results = await job.wait()
            _in_order(results)
            assert job.status == "completed" and job.counts == gg.BatchCounts(300, 300, 0)
        assert sim.batches.creates == 1
        sent = next(iter(sim.batches.batches.values())).requests[0]
        assert sent["custom_id"] == "0" and sent["params"]["max_tokens"] == 40
        assert "stream" not in sent["params"] and sent["params"]["model"]

    _claude(body)


def test_an_anthropic_item_the_dialect_refuses_is_refused_before_anything_is_sent(
    tmp_path: Path,
) -> None:
    async def body(sim: Claude) -> None:
        async with sim.gate() as gate:
            with pytest.raises(gg.BadRequestError, match=r"item 1: .*logprobs"):
                await gate.batch([*_items(1), {**_items(1)[0], "logprobs": True}],
                                 job_dir=tmp_path)
        assert sim.batches.creates == 0

    _claude(body)


class Crash(Exception):
    """The process dies here."""


@pytest.mark.parametrize("point", ["before-create", "after-create"])
def test_an_anthropic_crash_around_create_resumes_with_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    """Message Batches carry no metadata: the create's intent (its size, sent-after time) in
    job_dir finds a batch whose id the crash lost, and nothing is created twice."""
    create = AnthropicBatches.create

    async def crash(self: AnthropicBatches, *args: Any) -> str:
        if point == "after-create":
            await create(self, *args)
        raise Crash(point)

    async def body(sim: Claude) -> None:
        with monkeypatch.context() as patch:
            patch.setattr(AnthropicBatches, "create", crash)
            async with sim.gate() as gate:
                with pytest.raises(Crash):
                    await gate.batch(_items(40), job_dir=tmp_path)
        record = json.loads((tmp_path / "job.json").read_text())
        assert record["parts"][0]["created_after"] is not None  # recorded before the send
        assert record["parts"][0]["batch_id"] is None
        async with sim.gate() as gate:
            job = await gate.batch(_items(40), job_dir=tmp_path)
            assert job.resumed
            _in_order(await job.wait())
        assert sim.batches.creates == 1

    _claude(body)


def test_an_anthropic_lost_create_matching_two_batches_is_not_guessed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    create = AnthropicBatches.create

    async def crash(self: AnthropicBatches, *args: Any) -> str:
        await create(self, *args)
        await create(self, *args)  # another client's batch of the same size, same window
        raise Crash("after-create")

    async def body(sim: Claude) -> None:
        with monkeypatch.context() as patch:
            patch.setattr(AnthropicBatches, "create", crash)
            async with sim.gate() as gate:
                with pytest.raises(Crash):
                    await gate.batch(_items(5), job_dir=tmp_path)
        async with sim.gate() as gate:
            with pytest.raises(BatchLookupError, match="2 batches match"):
                await gate.batch(_items(5), job_dir=tmp_path)
            # taken up to be seen (gptgate batch status): shown, not guessed, not refused
            job = await gate.take_up_batch(_items(5), job_dir=tmp_path)
            assert job.status == "submitting" and job.batch_ids == []
        assert sim.batches.creates == 2  # nothing more was sent

    _claude(body)


def test_anthropic_failed_expired_and_cancelled_items_end_typed(tmp_path: Path) -> None:
    async def body(sim: Claude) -> None:
        async with sim.gate() as gate:
            results = await (await gate.batch(_items(200), job_dir=tmp_path / "a")).wait()
            failed = [r for r in results if isinstance(r, gg.BackendError)]
            expired = [r for r in results if isinstance(r, gg.RequestTimeout)]
            assert failed and expired
            assert all(isinstance(r, gg.ChatResult | gg.BackendError | gg.RequestTimeout)
                       for r in results)
            job = await gate.batch(_items(50), job_dir=tmp_path / "c", poll_s=30)
            await sim.clock.sleep(300)  # half of it ran
            await job.cancel()
            ended = await job.wait()
            assert job.status == "cancelled"
            assert any(isinstance(r, gg.ChatResult) for r in ended)
            assert any(isinstance(r, gg.BatchCancelledError) for r in ended)

    _claude(body, SimBatchPlan(complete_after_s=600, fail_rate=0.1, expire_rate=0.1, seed=2))


def test_the_anthropic_ledger_equals_the_bill_at_half_price_cache_included(
    tmp_path: Path,
) -> None:
    """A long shared system prompt is marked for the cache (as live): the first item writes
    it, later ones read it; the ledger books writes at 1.25× and reads at 0.1× the input
    price, all of it at the batch discount — what the simulated Anthropic bills."""
    system = {"role": "system", "content": "You are a careful assistant. " * 300}
    items = [{"messages": [system, *item["messages"]], "max_tokens": 40} for item in _items(50)]

    async def body(sim: Claude) -> None:
        async with sim.gate() as gate:
            results = await (await gate.batch(items, job_dir=tmp_path)).wait()
            entry = gate.ledger.entries["claude"]
        assert all(isinstance(r, gg.ChatResult) for r in results)
        batches = sim.batches
        assert batches.billed_cache_write_tokens > 0 and batches.billed_cache_read_tokens > 0
        bill = batches.bill_usd(CLAUDE.input_per_mtok, CLAUDE.output_per_mtok, 0.5)
        assert entry.batch_requests == 50
        assert entry.batch_cost_usd == pytest.approx(bill, rel=1e-9)
        assert entry.cost_usd == pytest.approx(bill, rel=1e-9)

    _claude(body)


# -- the body through the dialect -----------------------------------------------------------


def test_a_batch_body_is_built_by_the_dialect_extra_body_merged(tmp_path: Path) -> None:
    """``extra_body=`` means what it means live: its keys go into the body (before, the
    batch path wrote a literal ``"extra_body"`` key, which OpenAI refuses)."""

    async def main() -> None:
        clock = LoopClock()
        backend, engine = sim_backend("hosted", name="oa", clock=clock)
        batches = SimBatches(engine, SimBatchPlan(complete_after_s=60)).attach()
        async with gg.Gateway([backend], clock=clock) as gate:
            job = await gate.batch(_items(3), job_dir=tmp_path, extra_body={"top_k": 5})
            _in_order(await job.wait())
        sent = next(f for f in batches.files.values() if f.purpose == "batch")
        body = json.loads(sent.data.splitlines()[0])["body"]
        assert body["top_k"] == 5 and "extra_body" not in body

    run_virtual(main)


# -- batch prices from genai-prices ---------------------------------------------------------


def test_a_table_batch_price_wins_over_the_fixed_discount() -> None:
    """Where genai-prices states a model's batch price (a ``processing: batch`` variant, in
    force from its start date), a batch answer is booked at it — the provider's own discount,
    cache reads and writes included — whatever ``batch_discount`` says; before that date, or
    for a model without one, at ``batch_discount`` of the live price."""
    from datetime import UTC, datetime

    from gptgate.ledger import Ledger
    from gptgate.prices import catalog_price

    source = catalog_price("anthropic", "claude-fable-5")
    assert source is not None
    usage = gg.Usage(input_tokens=1_000_000, cached_input_tokens=600_000,
                     cache_write_input_tokens=200_000, output_tokens=100_000)
    stated = Ledger({"c": source}, utc_now=lambda: datetime(2026, 11, 1, tzinfo=UTC))
    live = stated.cost("c", usage)
    cost = stated.record_batch("c", usage, discount=0.25)
    # 0.2M uncached at $5, 0.2M written at $6.25, 0.6M read at $0.5, 0.1M out at $25
    assert cost == pytest.approx(0.2 * 5 + 0.2 * 6.25 + 0.6 * 0.5 + 0.1 * 25)
    assert cost == pytest.approx(live * 0.5) and stated.entries["c"].batch_cost_usd == cost
    before = Ledger({"c": source}, utc_now=lambda: datetime(2026, 9, 1, tzinfo=UTC))
    assert before.record_batch("c", usage, discount=0.25) == pytest.approx(live * 0.25)


def test_an_anthropic_job_over_loopback_http(tmp_path: Path) -> None:
    """Over real sockets: the batches URL under the server root, ``x-api-key`` and
    ``anthropic-version`` on every request, the absolute ``results_url`` fetched."""
    import anyio

    from gptgate.sim import SimServer

    clock = gg.ScaledClock(2000)
    profile = ANTHROPIC_PROFILE.model_copy(update={"rpm": None, "tpm": None})
    engine = SimEngine(profile, clock=clock, seed=4)
    assert isinstance(engine, AnthropicEngine)
    sim = SimMessageBatches(engine, SimBatchPlan(complete_after_s=120, fail_rate=0.05,
                                                 seed=2)).attach()

    async def body(base_url: str) -> list[Any]:
        backend = gg.Backend(name="claude", provider="anthropic", base_url=base_url,
                             model=profile.model, api_key="sk-ant-test", price=CLAUDE)
        async with gg.Gateway([backend], clock=clock) as gate:
            job = await gate.batch(_items(100), job_dir=tmp_path, poll_s=10)
            return await job.wait()

    with SimServer(engine) as base_url:
        results = anyio.run(body, base_url)
    failed = [r for r in results if not isinstance(r, gg.ChatResult)]
    assert failed and all(isinstance(r, gg.BackendError) and r.status == 500 for r in failed)
    _in_order([r for r in results if isinstance(r, gg.ChatResult)])
    assert sim.creates == 1 and len(results) == 100
