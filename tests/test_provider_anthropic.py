"""``Backend(provider="anthropic")`` against the simulator's Messages API (issue 32): chat,
stream, tools, a paced 429 burst, parameters refused before sending, the ledger equal to the
server's bill (cache writes 1.25×, reads 0.1×), the cache marker the gate places, and the
official ``anthropic`` SDK on ``gate.http_client`` — over real loopback HTTP where sockets
matter, in virtual time where pacing is measured."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anthropic
import anyio
import httpx2
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import gptgate as gg
from gptgate.sim import ANTHROPIC_PROFILE, LoopClock, SimEngine, SimServer, run_virtual
from gptgate.sim.anthropic import bill_usd
from gptgate.sim.engine import SimResponse
from gptgate.testing import sim_backend
from gptgate.wire.anthropic import (
    AnthropicDialect,
    min_cacheable_tokens,
    parse_anthropic_rate_limits,
)
from gptgate.wire.dialect import Dialect, dialect_for

SCALE = 50.0
MODEL = "claude-sonnet-4-5"
PRICE = gg.Price(
    input_per_mtok=3.0, output_per_mtok=15.0, cached_input_per_mtok=0.3, cache_write_per_mtok=3.75
)
SYSTEM = {"role": "system", "content": "You are a careful assistant. " * 300}  # ~2,000 tokens
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "look a fact up",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}}]


def _profile(**over: Any) -> Any:
    return ANTHROPIC_PROFILE.model_copy(update={"output_tokens_mean": 40, **over})


def _ask(i: int) -> list[dict[str, Any]]:
    return [SYSTEM, {"role": "user", "content": f"Question {i}: name a prime."}]


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 0.005 * max(abs(a), abs(b))


@pytest.fixture
def server() -> Iterator[tuple[str, SimEngine]]:
    sim = SimEngine(_profile(), clock=gg.ScaledClock(SCALE), seed=5)
    with SimServer(sim, time_scale=SCALE) as base_url:
        yield base_url.removesuffix("/v1"), sim  # Anthropic's base_url is the server root


def _gateway(root: str, **gateway: Any) -> gg.Gateway:
    backend = gg.Backend(
        name="claude", provider="anthropic", base_url=root, model=MODEL, api_key="sk-ant-test",
        price=PRICE, concurrency=8, timeout=60.0,
    )
    return gg.Gateway([backend], clock=gg.ScaledClock(SCALE), seed=3, **gateway)


# -------------------------------------------------------------------- over loopback HTTP


async def test_chat_stream_and_ledger_equal_the_bill_over_http(
    server: tuple[str, SimEngine],
) -> None:
    root, sim = server
    async with _gateway(root) as gate:
        first = await gate.chat(_ask(0), max_tokens=30)
        second = await gate.chat(_ask(1), max_tokens=30)
        async with gate.stream(_ask(2), max_tokens=30) as s:
            parts = [t async for t in s]
        entry = gate.ledger.entries["claude"]
    assert first.text and first.finish_reason in ("stop", "length") and not first.streamed
    assert first.usage.cache_write_input_tokens > 1900 and first.usage.cached_input_tokens == 0
    assert second.usage.cached_input_tokens == first.usage.cache_write_input_tokens
    assert second.usage.input_tokens == first.usage.input_tokens  # the whole prompt each time
    assert len(parts) > 1 and "".join(parts) == s.result.text and s.result.streamed
    assert s.result.usage.cached_input_tokens > 1900 and s.result.usage.output_tokens > 0
    snap = sim.ledger.snapshot()
    assert (entry.input_tokens, entry.cached_input_tokens, entry.cache_write_input_tokens,
            entry.output_tokens) == (snap.input_tokens, snap.cached_input_tokens,
                                     snap.cache_write_input_tokens, snap.output_tokens)
    assert _close(entry.cost_usd, bill_usd(snap, 3.0, 15.0))


async def test_the_anthropic_sdk_on_the_gateway_client_is_governed_traced_and_billed(
    server: tuple[str, SimEngine],
) -> None:
    root, sim = server
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    gate = _gateway(root, tracer_provider=tracer_provider)
    client = anthropic.AsyncAnthropic(
        api_key="sk-ant-test", base_url=root, http_client=gate.http_client("claude"),
        max_retries=0,
    )
    system = [{"type": "text", "text": SYSTEM["content"], "cache_control": {"type": "ephemeral"}}]
    async with gate:
        for i in range(2):
            message = await client.messages.create(
                model=MODEL, max_tokens=30, system=system,
                messages=[{"role": "user", "content": f"q{i}"}],
            )
        async with client.messages.stream(
            model=MODEL, max_tokens=30, system=system, messages=[{"role": "user", "content": "s"}]
        ) as stream:
            text = "".join([t async for t in stream.text_stream])
        stats = gate.stats()["claude"]
        entry = gate.ledger.entries["claude"]
    assert message.usage.cache_read_input_tokens > 1900 and text
    assert stats.calls == 3 and stats.in_flight == 0 and stats.pool.checked_out == 0
    assert entry.streamed_attempts == 1 and entry.plain_attempts == 2
    snap = sim.ledger.snapshot()
    assert (entry.input_tokens, entry.cached_input_tokens, entry.cache_write_input_tokens) == (
        snap.input_tokens, snap.cached_input_tokens, snap.cache_write_input_tokens)
    assert _close(entry.cost_usd, bill_usd(snap, 3.0, 15.0))
    clients = [s for s in spans.get_finished_spans() if s.kind == SpanKind.CLIENT]
    assert len(clients) == 3
    for span in clients:
        attributes = span.attributes
        assert attributes is not None
        assert span.name == f"chat {MODEL}" and attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.request.max_tokens"] == 30
        assert attributes["gen_ai.usage.input_tokens"] > 1900  # reads and writes included
        assert attributes["gen_ai.response.finish_reasons"]
        assert "sk-ant-test" not in json.dumps(dict(attributes))
    assert [s.attributes["gen_ai.request.stream"] for s in clients if s.attributes] == [
        False, False, True]


# -------------------------------------------------------------------- in virtual time


def _virtual(main: Any, concurrency: int = 16, **profile: Any) -> Any:
    async def run() -> Any:
        clock = LoopClock()
        backend, engine = sim_backend(
            _profile(**profile), name="claude", clock=clock, seed=7, provider="anthropic",
            base_url="http://127.0.0.1:8000", api_key="sk-ant-test", price=PRICE,
            concurrency=concurrency, model=MODEL,
        )
        async with gg.Gateway([backend], clock=clock, seed=3) as gate:
            return await main(gate, engine)

    return run_virtual(run)


def test_tools_round_trip_as_openai_tool_calls() -> None:
    async def main(gate: gg.Gateway, engine: SimEngine) -> tuple[Any, Any, Any]:
        call = await gate.chat([{"role": "user", "content": "Look up 7."}], tools=TOOLS,
                               max_tokens=200)
        assert call.raw is not None
        (tool_call,) = call.raw["choices"][0]["message"]["tool_calls"]
        answer = await gate.chat([
            {"role": "user", "content": "Look up 7."},
            {"role": "assistant", "content": None, "tool_calls": [tool_call]},
            {"role": "tool", "tool_call_id": tool_call["id"], "content": "7 is prime"},
        ], tools=TOOLS, max_tokens=50)
        async with gate.stream([{"role": "user", "content": "Look up 9."}], tools=TOOLS,
                               max_tokens=200) as s:
            [_ async for _ in s]
        return call, answer, s.result

    call, answer, streamed = _virtual(main)
    assert call.finish_reason == "tool_calls"
    (tool_call,) = call.raw["choices"][0]["message"]["tool_calls"]
    assert tool_call["function"]["name"] == "lookup"
    assert json.loads(tool_call["function"]["arguments"]) == {"q": "sim"}
    assert answer.finish_reason in ("stop", "length") and answer.text
    assert streamed.finish_reason == "tool_calls"
    (streamed_call,) = streamed.raw["choices"][0]["message"]["tool_calls"]
    assert json.loads(streamed_call["function"]["arguments"]) == {"q": "sim"}


@pytest.mark.parametrize(
    "param", [{"logprobs": True}, {"frequency_penalty": 0.5}, {"response_format":
              {"type": "json_object"}}, {"n": 2}, {"seed": 1}],
)
def test_an_unsupported_parameter_is_refused_before_sending(param: dict[str, Any]) -> None:
    (name,) = param

    async def main(gate: gg.Gateway, engine: SimEngine) -> int:
        with pytest.raises(gg.BadRequestError) as info:
            await gate.chat(_ask(0), **param)
        assert f"'anthropic' rejects the parameter '{name}'" in info.value.message
        return engine.ledger.snapshot().requests

    assert _virtual(main) == 0


def test_extra_body_sends_anthropic_only_fields_and_stop_maps_to_stop_sequences() -> None:
    seen: list[dict[str, Any]] = []

    async def main(gate: gg.Gateway, engine: SimEngine) -> None:
        handle = engine.handle

        async def spy(
            method: str, path: str, headers: Mapping[str, str], body: bytes, query: str = ""
        ) -> Any:
            seen.append(json.loads(body))
            return await handle(method, path, headers, body, query)

        engine.handle = spy  # type: ignore[method-assign]
        await gate.chat(_ask(0), stop="END", user="u-1", extra_body={"top_k": 5})
        await gate.chat(_ask(1), max_tokens=12)

    _virtual(main)
    first, second = seen
    assert first["stop_sequences"] == ["END"] and first["top_k"] == 5
    assert first["metadata"] == {"user_id": "u-1"}
    assert first["max_tokens"] == gg.wire.anthropic.DEFAULT_MAX_TOKENS  # required: defaulted
    assert second["max_tokens"] == 12
    dialect = _dialect()
    body = _body(dialect, _ask(0), max_completion_tokens=None, max_tokens=7)
    assert body["max_tokens"] == 7
    only = "'anthropic' accepts only 0 to 1 for the parameter 'temperature'"
    with pytest.raises(gg.BadRequestError, match=only):
        dialect.build_body(MODEL, _ask(0), {"temperature": 1.5}, stream=False)
    assert first["system"][-1]["cache_control"] == {"type": "ephemeral"}  # the gate's marker


def test_a_429_burst_is_paced_from_anthropic_headers() -> None:
    """30 calls, 4 at a time, against 12 requests/minute: the headers (limit, remaining,
    RFC 3339 reset) pace them, so no more than 2 consecutive 429s are sent. Without reading
    them (retry-after alone), the 4 in flight hit the empty budget together, again and again
    (runs of 4 and more)."""
    statuses: list[int] = []

    async def main(gate: gg.Gateway, engine: SimEngine) -> list[Any]:
        handle = engine.handle

        async def spy(
            method: str, path: str, headers: Mapping[str, str], body: bytes, query: str = ""
        ) -> Any:
            response: SimResponse = await handle(method, path, headers, body, query)
            statuses.append(response.status)
            return response

        engine.handle = spy  # type: ignore[method-assign]
        results: list[Any] = []

        async def one(i: int) -> None:
            results.append(await gate.chat(
                [{"role": "user", "content": f"q{i}"}], max_tokens=20, max_attempts=10))

        await one(0)
        async with anyio.create_task_group() as tg:
            for i in range(1, 30):
                tg.start_soon(one, i)
        return results

    results = _virtual(main, concurrency=4, rpm=12)
    assert len(results) == 30
    run = longest = 0
    for status in statuses:
        run = run + 1 if status == 429 else 0
        longest = max(longest, run)
    assert longest <= 2, statuses


def test_an_overload_529_is_retried_as_congestion() -> None:
    async def main(gate: gg.Gateway, engine: SimEngine) -> Any:
        async def one(i: int) -> None:
            await gate.chat([{"role": "user", "content": f"q{i}"}], max_attempts=10)

        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(one, i)
        return engine.ledger.snapshot()

    snap = _virtual(main, replicas=1, slots=1, max_queue=0)
    assert snap.ok == 3 and snap.server_errors >= 1  # 529s were sent, every call got through


# -------------------------------------------------------------------- the dialect, unit


def _dialect(model: str = MODEL, **options: Any) -> AnthropicDialect:
    backend = gg.Backend(name="a", provider="anthropic", model=model, **options)
    dialect = dialect_for(backend)
    assert isinstance(dialect, AnthropicDialect)
    return dialect


def test_url_and_auth_follow_the_anthropic_sdk() -> None:
    dialect = _dialect()
    assert str(dialect.chat_url(httpx2.URL("https://api.anthropic.com/"))) == (
        "https://api.anthropic.com/v1/messages")
    assert str(dialect.chat_url(httpx2.URL("http://proxy/v1/"))) == "http://proxy/v1/messages"
    assert dialect.auth_headers("k") == {"anthropic-version": "2023-06-01", "x-api-key": "k"}
    pinned = _dialect(headers={"anthropic-version": "2026-10-21"})
    assert pinned.auth_headers(None) == {"anthropic-version": "2026-10-21"}


def _body(dialect: AnthropicDialect, messages: list[dict[str, Any]], **params: Any) -> Any:
    return json.loads(dialect.build_body(MODEL, messages, params, stream=False))


def test_messages_map_system_images_tool_calls_and_results() -> None:
    body = _body(_dialect(), [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}},
            {"type": "image_url", "image_url": {"url": "https://x/cat.png"}},
        ]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function",
             "function": {"name": "lookup", "arguments": '{"q": "cat"}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "a cat"},
        {"role": "user", "content": "Thanks."},
    ], tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    assert body["system"] == [{"type": "text", "text": "Be terse."}]
    user, assistant, result = body["messages"]
    assert user["content"][1]["source"] == {"type": "base64", "media_type": "image/jpeg",
                                            "data": "QUJD"}
    assert user["content"][2]["source"] == {"type": "url", "url": "https://x/cat.png"}
    assert assistant["content"] == [{"type": "tool_use", "id": "t1", "name": "lookup",
                                     "input": {"q": "cat"}}]
    assert result["role"] == "user"  # the tool result and the next user turn, merged
    assert result["content"][0]["type"] == "tool_result"
    assert result["content"][0]["tool_use_id"] == "t1"
    assert body["tools"][0]["input_schema"]["required"] == ["q"]
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}


def test_the_cache_marker_goes_at_the_prefix_end_within_anthropic_rules() -> None:
    dialect = _dialect()
    long = _body(dialect, _ask(0))
    assert long["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in json.dumps(long["messages"])  # only the shared prefix
    short = _body(dialect, [{"role": "system", "content": "Be terse."},
                            {"role": "user", "content": "hi"}])
    assert "cache_control" not in json.dumps(short)  # below the minimum: never marked
    assert "cache_control" not in json.dumps(_body(dialect, [SYSTEM]))  # no prefix at all
    haiku = _dialect("claude-haiku-4-5")
    assert min_cacheable_tokens("claude-haiku-4-5") == 4096
    assert "cache_control" not in json.dumps(_body(haiku, _ask(0)))  # 2,000 < Haiku's 4,096
    mark = {"type": "ephemeral"}
    own = [{"role": "system", "content": [{"type": "text", "text": f"part {i}",
                                           "cache_control": mark} for i in range(4)]},
           {"role": "user", "content": "x" * 8000}, {"role": "user", "content": "q"}]
    body = _body(dialect, own)
    assert json.dumps(body).count("cache_control") == 4  # the caller's four, none added
    mine = [{"role": "system", "content": [{"type": "text", "text": SYSTEM["content"],
                                            "cache_control": {"type": "ephemeral",
                                                              "ttl": "1h"}}]},
            {"role": "user", "content": "q"}]
    assert _body(dialect, mine)["system"][0]["cache_control"]["ttl"] == "1h"  # kept as given


def test_anthropic_rate_limit_headers_become_a_budget() -> None:
    headers = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:12Z",
        "anthropic-ratelimit-tokens-limit": "40000",
        "anthropic-ratelimit-tokens-remaining": "39000",
        "anthropic-ratelimit-tokens-reset": "2026-01-01T00:00:03Z",
        "anthropic-ratelimit-input-tokens-limit": "30000",
        "anthropic-ratelimit-input-tokens-remaining": "1000",
        "anthropic-ratelimit-input-tokens-reset": "2026-01-01T00:00:30.5Z",
    }
    now = 1767225600.0  # 2026-01-01T00:00:00Z
    info = parse_anthropic_rate_limits(headers, now=now)
    assert info is not None
    assert (info.limit_requests, info.remaining_requests, info.reset_requests_s) == (50, 0, 12.0)
    # the tighter token family: input tokens
    assert (info.limit_tokens, info.remaining_tokens, info.reset_tokens_s) == (30000, 1000, 30.5)
    assert parse_anthropic_rate_limits({"x-ratelimit-limit-requests": "5"}) is None
    late = parse_anthropic_rate_limits(
        {"anthropic-ratelimit-requests-remaining": "1",
         "anthropic-ratelimit-requests-reset": "not a date"}, now=now)
    assert late is not None and late.reset_requests_s is None


def test_answers_map_stop_reasons_and_usage_on_top_of_input() -> None:
    dialect = _dialect()
    body = json.dumps({
        "id": "msg_1", "type": "message", "role": "assistant", "model": MODEL,
        "content": [{"type": "text", "text": "Hi"},
                    {"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 2000,
                  "cache_creation_input_tokens": 300, "output_tokens": 7},
    }).encode()
    parsed = dialect.parse_response(body, backend="a")
    assert parsed.text == "Hi" and parsed.finish_reason == "tool_calls"
    assert parsed.usage is not None
    assert (parsed.usage.input_tokens, parsed.usage.cached_input_tokens,
            parsed.usage.cache_write_input_tokens) == (2310, 2000, 300)
    for reason, finish in (("end_turn", "stop"), ("max_tokens", "length"),
                           ("stop_sequence", "stop")):
        one = json.dumps({"content": [], "stop_reason": reason, "usage": {}}).encode()
        assert dialect.parse_response(one, backend="a").finish_reason == finish
    error = json.dumps({"type": "error", "error": {"type": "overloaded_error",
                                                   "message": "Overloaded"}}).encode()
    with pytest.raises(gg.BackendError):
        dialect.parse_response(error, backend="a")
    status_error = dialect.error_for_status(529, {}, error, backend="a")
    assert isinstance(status_error, gg.BackendError) and status_error.retryable


def test_batch_content_reads_the_shared_prefix_where_a_plain_client_reads_nothing() -> None:
    """Issue 32: ``batch_content`` with a shared ~2,000-token system prompt reaches ≥ 90% of
    the cache-read ceiling (every call but one reading the prefix); the plain client without
    markers reads 0 (benchmarks/cache_anthropic.py, smaller)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import cache_anthropic

    ceiling, (plain, _, gate) = cache_anthropic.measure(calls=80, concurrency=16, seed=2)
    assert plain.ledger.cached_input_tokens == 0
    assert gate.ledger.cached_input_tokens >= 0.9 * ceiling


def test_the_dialect_has_every_member_of_the_seam() -> None:
    dialect = _dialect()
    members = set(Dialect.__annotations__) | {n for n in vars(Dialect) if not n.startswith("_")}
    assert members and all(hasattr(dialect, name) for name in members), sorted(
        name for name in members if not hasattr(dialect, name))


def test_the_gate_steps_aside_when_the_prefix_is_below_the_models_minimum() -> None:
    """Claude Haiku 4.5 caches nothing under 4,096 tokens: a ~2,000-token shared prompt gets
    no marker, and the cache gate must not warm it up and ramp waiting for hits that cannot
    come. Before: gptgate took 109.5 s where the plain client took 19.4 s (200 calls, c=32)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import cache_anthropic

    _, (plain, _, gate) = cache_anthropic.measure(80, 16, 2, cache_anthropic.HAIKU)
    assert gate.ledger.cached_input_tokens == 0 == gate.ledger.cache_write_input_tokens
    assert gate.seconds <= 1.1 * plain.seconds, (gate.seconds, plain.seconds)


def _sse(*events: tuple[str, dict[str, Any]]) -> list[bytes]:
    return [f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()
            for name, data in events]


async def _read(chunks: list[bytes]) -> tuple[list[str], Any]:
    async def stream() -> Any:
        for chunk in chunks:
            yield chunk

    reader = _dialect().stream_reader(stream(), backend="a", request_id="r1")
    seen: list[str] = []
    async for delta in reader:
        seen.append(delta)
    return seen, reader.result()


START = ("message_start", {"message": {"id": "msg_1", "model": MODEL, "usage": {
    "input_tokens": 5, "cache_read_input_tokens": 2000, "cache_creation_input_tokens": 0,
    "output_tokens": 1}}})
OVERLOADED = ("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}})


async def test_a_stream_folds_events_and_an_overload_is_retryable_before_the_first_token() -> None:
    seen, result = await _read(_sse(
        START, ("content_block_start", {"index": 0, "content_block": {"type": "text",
                                                                      "text": ""}}),
        ("ping", {}), ("content_block_delta", {"index": 0, "delta": {"type": "text_delta",
                                                                       "text": "Hel"}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "lo"}}),
        ("content_block_stop", {"index": 0}),
        ("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}),
        ("message_stop", {}),
    ))
    assert seen == ["Hel", "lo"] and result.text == "Hello" and result.finish_reason == "stop"
    assert (result.usage.input_tokens, result.usage.cached_input_tokens,
            result.usage.output_tokens) == (2005, 2000, 9)
    with pytest.raises(gg.BackendError) as early:
        await _read(_sse(START, OVERLOADED))
    assert early.value.retryable and not isinstance(early.value, gg.StreamInterruptedError)
    with pytest.raises(gg.StreamInterruptedError) as late:
        await _read(_sse(START, ("content_block_delta", {
            "index": 0, "delta": {"type": "text_delta", "text": "Par"}}), OVERLOADED))
    assert late.value.partial_text == "Par"
