"""A streamed answer begins at its first output of any kind: a tool call's first piece,
reasoning, Anthropic's thinking — not only at its first text (gptgate/wire/stream_start.py).

Timed by its first text, a tool-call answer had no first token until its end: `ttft_s` was
None on every one, and `HedgePolicy(tools=True)` — the documented opt-in — never hedged one
(the hedge learned no normal wait for them and never saw them start): with 5% of requests
stalled 2-4 s, 0 hedges and a p97 of 3.25 s, where text calls were hedged."""

from __future__ import annotations

import json
import statistics
from typing import Any

import anyio

import gptgate as gg
from gptgate.sim import LoopClock, get_profile, run_virtual
from gptgate.testing import sim_backend
from gptgate.wire.openai import ChatStreamReader

TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "look a fact up",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}}]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


async def _read(*chunks: bytes) -> list[str]:
    async def stream() -> Any:
        for chunk in (*chunks, b"data: [DONE]\n\n"):
            yield chunk

    reader = ChatStreamReader(stream(), backend="b")
    return [delta async for delta in reader]


async def test_the_reader_marks_the_start_of_an_answer_without_text_once() -> None:
    call = {"index": 0, "id": "t1", "type": "function",
            "function": {"name": "lookup", "arguments": ""}}
    assert await _read(
        _chunk({"role": "assistant", "content": None}),  # the role alone: nothing begun
        _chunk({"tool_calls": [call]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, "tool_calls"),
    ) == [""]
    assert await _read(  # deepseek-reasoner: reasoning first, then the text
        _chunk({"role": "assistant", "content": None, "reasoning_content": "Hmm"}),
        _chunk({"content": "Yes"}, "stop"),
    ) == ["", "Yes"]
    assert await _read(_chunk({"content": "Hi"}), _chunk({}, "stop")) == ["Hi"]


def _run(main: Any, **profile: Any) -> Any:
    async def run() -> Any:
        clock = LoopClock()
        backend, _ = sim_backend(
            get_profile("gpu").model_copy(update={"output_tokens_mean": 80, **profile}),
            name="gpu", clock=clock, seed=8, concurrency=16,
        )
        async with gg.Gateway([backend], clock=clock, seed=5) as gate:
            return await main(gate)

    return run_virtual(run)


def test_a_streamed_tool_call_has_a_first_token_and_shows_the_caller_no_empty_delta() -> None:
    async def main(gate: gg.Gateway) -> tuple[list[str], Any]:
        async with gate.stream([{"role": "user", "content": "Look up 7."}], tools=TOOLS,
                               max_tokens=100) as s:
            deltas = [d async for d in s]
        return deltas, s.result

    deltas, result = _run(main)
    assert deltas == [] and result.finish_reason == "tool_calls"
    assert result.ttft_s is not None and result.ttft_s < result.latency_s


def test_hedging_opted_in_for_tools_hedges_a_stalled_tool_call() -> None:
    async def main(gate: gg.Gateway) -> tuple[int, list[float]]:
        latencies: list[float] = []

        async def one(i: int) -> None:
            result = await gate.chat(
                [{"role": "user", "content": f"Q{i}: look it up. " + "x" * 200}],
                tools=TOOLS, max_tokens=200, hedge=gg.HedgePolicy(tools=True),
            )
            assert result.finish_reason == "tool_calls"
            latencies.append(result.latency_s)

        async with anyio.create_task_group() as tg:
            for i in range(160):
                tg.start_soon(one, i)
                await anyio.sleep(0.05)
        return gate.stats()["gpu"].hedges, latencies

    hedges, latencies = _run(main, straggler_rate=0.05, straggler_s=(2.0, 4.0))
    assert hedges >= 4  # the stalled ones (0 before)
    assert statistics.quantiles(latencies, n=100)[96] < 1.0  # p97 (3.25 s before)
    assert max(latencies) < 2.0  # no call waited out its stall
