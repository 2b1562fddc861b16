"""The simulator's DeepSeek flavor, and gptgate billing it right over loopback HTTP (issue 32).

The report: on a DeepSeek-shaped server every call succeeded, but the ledger counted 0 cached
tokens and billed 7× the server's bill. DeepSeek reports its cache at the top level
(``prompt_cache_hit_tokens``), a stream's usage on its last chunk, and prices a hit at $0.07
against $0.27 a miss."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

import gptgate as gg
from gptgate.sim import (
    DEEPSEEK_PRICE,
    DEEPSEEK_PROFILE,
    LoopClock,
    SimEngine,
    SimServer,
    SimTransport,
    run_virtual,
)
from gptgate.sim.deepseek import DeepSeekEngine

AUTH = {"authorization": "Bearer sk-test"}
SYSTEM = "You are a terse assistant who answers with one short sentence. " * 60  # ~900 tokens
SCALE = 50.0


def _messages(i: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Question {i}?"}]


def _post(
    bodies: list[dict[str, Any]], headers: dict[str, str] = AUTH, path: str = "/chat/completions"
) -> tuple[list[httpx2.Response], SimEngine]:
    async def main() -> tuple[list[httpx2.Response], SimEngine]:
        engine = SimEngine(DEEPSEEK_PROFILE, clock=LoopClock(), seed=3)
        out = []
        async with httpx2.AsyncClient(
            transport=SimTransport(engine), base_url="http://sim"
        ) as client:
            for body in bodies:
                out.append(await client.post(path, json=body, headers=headers))
        return out, engine

    return run_virtual(main)


def _body(i: int = 0, **over: Any) -> dict[str, Any]:
    return {"model": "deepseek-chat", "messages": _messages(i), "max_tokens": 40, **over}


def test_usage_reports_the_cache_at_the_top_level_in_64_token_units() -> None:
    (first, second), engine = _post([_body(0), _body(1)])
    assert isinstance(engine, DeepSeekEngine)
    cold, warm = first.json()["usage"], second.json()["usage"]
    assert "prompt_tokens_details" not in warm
    assert cold["prompt_cache_hit_tokens"] == 0
    hit = warm["prompt_cache_hit_tokens"]
    assert hit > 0 and hit % 64 == 0
    assert hit + warm["prompt_cache_miss_tokens"] == warm["prompt_tokens"]
    assert engine.ledger.snapshot().cached_input_tokens == hit


def test_a_stream_carries_its_usage_on_the_finish_chunk() -> None:
    (r,), _ = _post([_body(stream=True, stream_options={"include_usage": True})])
    events = [
        json.loads(line[6:]) for line in r.text.splitlines()
        if line.startswith("data: {")
    ]
    last = events[-1]
    assert last["choices"][0]["finish_reason"] in ("stop", "length")
    assert last["usage"]["prompt_cache_miss_tokens"] == last["usage"]["prompt_tokens"]
    assert all(e["choices"] for e in events)  # no separate usage-only chunk


def test_a_request_without_a_bearer_key_is_a_401() -> None:
    (r,), engine = _post([_body()], headers={"api-key": "sk-test"})
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "authentication_error"
    assert engine.ledger.snapshot().ok == 0


def test_reasoner_reports_reasoning_tokens_inside_completion_tokens() -> None:
    async def main() -> dict[str, Any]:
        profile = DEEPSEEK_PROFILE.model_copy(update={"model": "deepseek-reasoner"})
        engine = SimEngine(profile, clock=LoopClock(), seed=3)
        async with httpx2.AsyncClient(
            transport=SimTransport(engine), base_url="http://sim"
        ) as client:
            r = await client.post("/chat/completions", json=_body(), headers=AUTH)
        usage: dict[str, Any] = r.json()["usage"]
        return usage

    usage = run_virtual(main)
    reasoning = usage["completion_tokens_details"]["reasoning_tokens"]
    assert 0 < reasoning <= usage["completion_tokens"]
    assert gg.Usage is not None and reasoning == usage["completion_tokens"] * 3 // 4


# -- over loopback HTTP ---------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[tuple[str, SimEngine]]:
    profile = DEEPSEEK_PROFILE.model_copy(update={"output_tokens_mean": 40})
    sim = SimEngine(profile, clock=gg.ScaledClock(SCALE), seed=7)
    with SimServer(sim, time_scale=SCALE) as base_url:
        yield base_url.removesuffix("/v1"), sim  # DeepSeek's root, as its preset has it


def _gateway(root: str, price: gg.Price | None) -> gg.Gateway:
    backend = gg.Backend(
        name="ds", provider="deepseek", base_url=root, model="deepseek-chat",
        api_key="sk-test", concurrency=8, price=price,
    )
    return gg.Gateway([backend], clock=gg.ScaledClock(SCALE), seed=3)


async def _traffic(gate: gg.Gateway) -> list[gg.ChatResult]:
    results = [await gate.chat(_messages(0), max_tokens=40)]  # writes the shared prefix
    for i in range(1, 9):
        if i % 2:
            results.append(await gate.chat(_messages(i), max_tokens=40))
        else:
            async with gate.stream(_messages(i), max_tokens=40) as s:
                _ = [t async for t in s]
            assert s.result is not None
            results.append(s.result)
    return results


def _assert_ledger_is_the_bill(
    stats: gg.BackendStats, sim: SimEngine, price: gg.Price
) -> None:
    bill = sim.ledger.snapshot()
    assert (stats.input_tokens, stats.cached_input_tokens, stats.output_tokens) == (
        bill.input_tokens, bill.cached_input_tokens, bill.output_tokens
    )
    assert bill.cached_input_tokens > 0.6 * bill.input_tokens
    # hits at DeepSeek's cache price: the bill is far below every token at the miss price
    assert bill.bill_usd(price) < 0.6 * bill.billed_usd(price)
    assert stats.cost_usd == pytest.approx(bill.bill_usd(price), rel=0.005)


async def test_chat_and_stream_are_billed_as_deepseek_bills_them(
    server: tuple[str, SimEngine],
) -> None:
    root, sim = server
    async with _gateway(root, DEEPSEEK_PRICE) as gate:
        results = await _traffic(gate)
        stats = gate.stats()["ds"]
    assert any(r.streamed for r in results) and any(not r.streamed for r in results)
    streamed = [r for r in results if r.streamed]
    assert all(r.usage.cached_input_tokens > 0 and not r.usage.estimated for r in streamed)
    _assert_ledger_is_the_bill(stats, sim, DEEPSEEK_PRICE)


async def test_without_a_price_the_tables_deepseek_price_matches_the_bill(
    server: tuple[str, SimEngine],
) -> None:
    root, sim = server
    async with _gateway(root, None) as gate:
        await _traffic(gate)
        stats = gate.stats()["ds"]
        table = gate.ledger.price("ds")
    assert table is not None and table.cache_read_rate < table.input_per_mtok
    _assert_ledger_is_the_bill(stats, sim, table)


async def test_the_openai_sdk_on_gate_http_client_is_billed_as_deepseek_bills_it(
    server: tuple[str, SimEngine],
) -> None:
    """SDK traffic: the response tap kept only input and output tokens, so every cache hit
    was billed at the miss price."""
    openai = pytest.importorskip("openai")
    root, sim = server
    async with _gateway(root, DEEPSEEK_PRICE) as gate:
        client = openai.AsyncOpenAI(
            base_url=root, api_key="sk-test", http_client=gate.http_client("ds")
        )
        for i in range(4):
            await client.chat.completions.create(
                model="deepseek-chat", messages=_messages(i), max_tokens=40  # type: ignore[arg-type]
            )
        async with await client.chat.completions.create(
            model="deepseek-chat", messages=_messages(9), max_tokens=40,  # type: ignore[arg-type]
            stream=True, stream_options={"include_usage": True},
        ) as stream:
            async for _ in stream:
                pass
        stats = gate.stats()["ds"]
    _assert_ledger_is_the_bill(stats, sim, DEEPSEEK_PRICE)


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


async def test_tools_go_to_deepseeks_root_path_and_tool_calls_come_back(
    server: tuple[str, SimEngine],
) -> None:
    """Over loopback HTTP: a chat and a stream answered with a tool call in DeepSeek's shape
    (the stream's usage on its finish chunk), billed with the cache hits counted."""
    root, sim = server
    async with _gateway(root, DEEPSEEK_PRICE) as gate:
        results = [await gate.chat(_messages(0), tools=TOOLS, max_tokens=50)]
        async with gate.stream(_messages(1), tools=TOOLS, max_tokens=50) as s:
            _ = [t async for t in s]
        assert s.result is not None
        results.append(s.result)
        stats = gate.stats()["ds"]
    for r in results:
        assert r.finish_reason == "tool_calls" and r.raw is not None
        (call,) = r.raw["choices"][0]["message"]["tool_calls"]
        assert call["function"] == {"name": "get_weather", "arguments": '{"city":"sim"}'}
    assert results[1].usage.cached_input_tokens > 0 and not results[1].usage.estimated
    bill = sim.ledger.snapshot()
    assert (stats.input_tokens, stats.cached_input_tokens, stats.output_tokens) == (
        bill.input_tokens, bill.cached_input_tokens, bill.output_tokens
    )
    assert stats.cost_usd == pytest.approx(bill.bill_usd(DEEPSEEK_PRICE), rel=0.005)


# -- a 429 burst ----------------------------------------------------------------------------


async def _burst() -> tuple[list[Any], Any]:
    from gptgate.testing import sim_backend

    from .test_provider_azure import Recorder

    clock = LoopClock()
    profile = DEEPSEEK_PROFILE.model_copy(update={"slots": 4, "max_queue": 4})
    backend, _ = sim_backend(profile, name="ds", clock=clock, seed=2, provider="deepseek",
                             base_url="http://127.0.0.1:8000", api_key="sk-test",
                             concurrency=16, price=DEEPSEEK_PRICE)
    recorder = Recorder(backend.transport)
    backend = backend.model_copy(update={"transport": recorder})
    async with gg.Gateway([backend], clock=clock, seed=1, max_attempts=6) as gate:
        items = [{"messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 20}
                 for i in range(150)]
        results = await gate.map(items)
    return results, recorder


def test_a_429_burst_without_limit_headers_sends_no_more_than_two_429s_in_a_row() -> None:
    """DeepSeek states no limit in headers: its full queue answers 429 with nothing else.
    The calls after one are spaced by its retry-after (``spaced_after_429``), not sent all
    at once: 3 429s on this burst, where 27 were sent without the spacing."""
    results, recorder = run_virtual(_burst)
    assert 429 in recorder.statuses  # the queue really filled
    assert recorder.longest_429_run() <= 2
    assert recorder.statuses.count(429) <= 6
    assert [r for r in results if isinstance(r, BaseException)] == []
