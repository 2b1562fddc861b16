"""The official ``openai`` SDK under the gateway: ``http_client=gate.http_client(...)`` and
``@gate.guard`` around the SDK call.

What it shows
    * ``openai.AsyncOpenAI(http_client=gate.http_client("gpu-local"))``: the SDK's requests
      share the backend's connection pool and pass through its limiter, so SDK traffic and
      ``gate.chat`` count against one limit; each request is in ``gate.stats()`` and the
      ledger (tokens and dollars read from the response as the SDK reads it);
    * ``@gate.guard(...)`` around a function that calls the SDK: one permit per call, retries
      by the gateway's policy (pass ``max_retries=0`` to the SDK and let the gateway retry);
    * a streamed SDK call on the same client.

How to run
    python examples/openai_sdk.py

No API key, no network: it starts ``gptgate sim serve`` as a child process on a free loopback
port (``gptgate.sim.SimProcess``, a simulated GPU server 20x faster than real time) and stops
it at the end. Only the simulator runs on the scaled clock: the gateway keeps real time, as
against a real endpoint, so its timeouts are real seconds (on the server's clock a 60 s
attempt timeout would be 3 s of wall time, which a busy machine can miss). Against a real
endpoint, point the backend's ``base_url`` at it and export ``OPENAI_API_KEY``.
"""

from __future__ import annotations

import asyncio

import openai
from openai.types.chat import ChatCompletion

import gptgate as gg
from gptgate.sim import SimProcess

TIME_SCALE = 20.0


async def main(base_url: str) -> None:
    backend = gg.Backend(
        name="gpu-local", base_url=base_url, model="gpt-5.5", hardware="gpu",
        price=gg.Price(input_per_mtok=1.25, output_per_mtok=10.0),
    )
    gate = gg.Gateway([backend])  # real time, as in production (the docstring says why)
    client = openai.AsyncOpenAI(
        api_key="sim-needs-no-key",  # the simulator ignores it; use your key for real
        base_url=base_url,
        http_client=gate.http_client("gpu-local"),
        max_retries=0,  # the gateway retries, under one policy and one retry budget
    )

    @gate.guard(scenario="realtime_chat", backend="gpu-local")
    async def answer(question: str) -> ChatCompletion:
        return await client.chat.completions.create(
            model="gpt-5.5", messages=[{"role": "user", "content": question}], max_tokens=40
        )

    async with gate:
        # 1. a plain SDK call on the gateway's client
        completion = await client.chat.completions.create(
            model="gpt-5.5",
            messages=[{"role": "user", "content": "What is a connection pool?"}],
            max_tokens=30,
        )
        print(f"sdk call     -> {(completion.choices[0].message.content or '')[:50]!r}"
              f" ({completion.usage.completion_tokens if completion.usage else '?'} tokens)")

        # 2. a streamed SDK call: the permit is held until the stream is read to its end
        stream = await client.chat.completions.create(
            model="gpt-5.5",
            messages=[{"role": "user", "content": "Count to five."}],
            max_tokens=20,
            stream=True,
        )
        parts = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
        print(f"sdk stream   -> {len(parts)} chunks: {''.join(parts)[:50]!r}")

        # 3. guarded SDK calls, 12 at once
        questions = [f"Give me one fact about the number {i}." for i in range(12)]
        replies = await asyncio.gather(*(answer(q) for q in questions))
        print(f"guarded      -> {len(replies)} answers, e.g. "
              f"{(replies[0].choices[0].message.content or '')[:50]!r}")

        stats = gate.stats()["gpu-local"]
        print(
            f"stats        -> {stats.calls} calls through the gateway ({stats.failures} failed), "
            f"limit {stats.limit}, p50 {stats.latency_p50_s:.2f}s, "
            f"{stats.input_tokens + stats.output_tokens} tokens, ${stats.cost_usd:.5f}"
        )


if __name__ == "__main__":
    with SimProcess("gpu", time_scale=TIME_SCALE, seed=5) as server:  # `gptgate sim serve`
        print(f"simulator    -> serving {server.base_url}")
        asyncio.run(main(server.base_url))
