"""Quick start: one gateway, a chat call, a streamed answer, and the stats.

What it shows
    * ``gg.Gateway`` over one backend, opened with ``async with``;
    * ``await gate.chat(...)`` -> a ``ChatResult`` (text, backend, latency, tokens, cost);
    * ``async with gate.stream(...) as s: async for text in s`` -> text as it is generated;
    * ``gate.stats()`` -> the per-backend snapshot (limit, latency percentiles, tokens, cost).

How to run
    python examples/quickstart.py

No API key, no network: the backend is gptgate's built-in simulator of an OpenAI-compatible
GPU server, in this process, running 20x faster than real time (``ScaledClock(20)``; every
time gptgate reports is in the simulated server's seconds; its answers are filler words: it
models timing, tokens and cost, not language). To call a real endpoint, drop
``transport=`` and ``clock=``, give your own ``base_url`` and ``model``, and export
``OPENAI_API_KEY``.
"""

from __future__ import annotations

import asyncio

import gptgate as gg
from gptgate.sim import SimEngine, SimTransport


async def main() -> None:
    clock = gg.ScaledClock(20)  # one time base for the simulated server and the gateway
    backend = gg.Backend(
        name="gpu-sim",
        base_url="http://127.0.0.1:8000/v1",  # not dialled: the transport answers in-process
        model="gpt-5.5",
        hardware="gpu",
        price=gg.Price(input_per_mtok=1.25, cached_input_per_mtok=0.125, output_per_mtok=10.0),
        transport=SimTransport(SimEngine("gpu", clock=clock, seed=7)),
    )
    async with gg.Gateway([backend], clock=clock, seed=7) as gate:
        # 1. one call: the whole answer, with where it ran and what it cost
        result = await gate.chat(
            [{"role": "user", "content": "In one sentence: why do LLM calls need a gateway?"}],
            max_tokens=60,
        )
        print(f"chat  -> {result.text[:70]!r}...")
        print(
            f"         backend={result.backend} latency={result.latency_s:.2f}s "
            f"tokens in/out={result.usage.input_tokens}/{result.usage.output_tokens} "
            f"cost=${result.cost_usd:.6f}"
        )

        # 2. a stream: text as it is generated (a person is waiting: realtime_chat)
        print("stream -> ", end="", flush=True)
        messages = [{"role": "user", "content": "Name three things a connection pool does."}]
        async with gate.stream(messages, scenario="realtime_chat", max_tokens=40) as stream:
            async for text in stream:
                print(text, end="", flush=True)
        streamed = stream.result
        print(f"\n         first token after {streamed.ttft_s or 0.0:.2f}s, "
              f"whole answer {streamed.latency_s:.2f}s")

        # 3. a few calls at once, then the stats the gateway keeps per backend
        questions = [f"Give me tip #{i} for writing prompts." for i in range(20)]
        answers = await asyncio.gather(
            *(gate.chat([{"role": "user", "content": q}], max_tokens=30) for q in questions)
        )
        stats = gate.stats()["gpu-sim"]
        print(
            f"stats  -> {stats.calls} calls, {stats.failures} failed, limit {stats.limit} "
            f"({stats.limit_phase}), p50 {stats.latency_p50_s:.2f}s, "
            f"p95 {stats.latency_p95_s:.2f}s, "
            f"{stats.input_tokens + stats.output_tokens} tokens, ${stats.cost_usd:.5f}"
        )
        assert len(answers) == 20


if __name__ == "__main__":
    asyncio.run(main())
