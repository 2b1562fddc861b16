"""Anthropic's native Messages API through gptgate: ``Backend(provider="anthropic")`` and the
official ``anthropic`` SDK on ``gate.http_client(...)``.

What it shows
    * OpenAI-style calls (``gate.chat``, ``gate.stream``, tools) sent as Messages requests to
      ``{base_url}/v1/messages`` with ``x-api-key``, answers mapped back (``finish_reason``,
      ``tool_calls``);
    * the prompt cache: gptgate puts a ``cache_control`` marker at the end of the shared
      system prompt, so 20 calls at once write it once and read it 19 times;
    * the ``anthropic`` SDK's calls governed, traced and billed on the same backend;
    * the gateway's ledger against the server's own bill (cache writes 1.25×, reads 0.1×).

How to run
    python examples/anthropic_api.py

No API key, no network: it serves the simulator's Anthropic flavor
(``gptgate.sim.ANTHROPIC_PROFILE``) on a free loopback port, 20× faster than real time.
Only the simulator runs on the scaled clock: the gateway keeps real time, as against
Anthropic, so its timeouts are real seconds. Against Anthropic, drop ``base_url=`` and
``api_key=`` and export ``ANTHROPIC_API_KEY``.
"""

from __future__ import annotations

import asyncio

import anthropic

import gptgate as gg
from gptgate.sim import ANTHROPIC_PROFILE, SimEngine, SimServer
from gptgate.sim.anthropic import bill_usd

TIME_SCALE = 20.0
MODEL = "claude-sonnet-4-5"
SYSTEM = "You write product descriptions: short sentences, concrete nouns, one tip. " * 110
TOOLS = [{"type": "function", "function": {
    "name": "stock_level", "description": "units in stock for a product",
    "parameters": {"type": "object", "properties": {"sku": {"type": "string"}},
                   "required": ["sku"]},
}}]


async def main(root: str, engine: SimEngine) -> None:
    backend = gg.Backend(
        name="claude", provider="anthropic", base_url=root, model=MODEL,
        api_key="sk-ant-sim",  # the simulator takes any key; use yours (or the env var)
        price=gg.Price(input_per_mtok=3.0, output_per_mtok=15.0,
                       cached_input_per_mtok=0.30, cache_write_per_mtok=3.75),
    )
    gate = gg.Gateway([backend])  # real time, as in production: only the server is fast
    client = anthropic.AsyncAnthropic(
        api_key="sk-ant-sim", base_url=root, http_client=gate.http_client("claude"),
        max_retries=0,  # the gateway retries, under one policy and one retry budget
    )
    async with gate:
        # 1. twenty calls sharing one ~2,000-token system prompt, as one batch job
        items = [{"messages": [{"role": "system", "content": SYSTEM},
                               {"role": "user", "content": f"Describe kettle #{i}."}],
                  "max_tokens": 60} for i in range(20)]
        results = await gate.map(items, scenario="batch_content")
        done = [r for r in results if isinstance(r, gg.ChatResult)]
        reads = sum(r.usage.cached_input_tokens for r in done)
        writes = sum(r.usage.cache_write_input_tokens for r in done)
        print(f"batch        -> {len(done)} answers, cache reads {reads:,} tokens, "
              f"writes {writes:,} (one prefix, written once)")

        # 2. a stream, mapped from Messages events
        async with gate.stream([{"role": "user", "content": "Name three teas."}],
                               max_tokens=30) as stream:
            text = "".join([piece async for piece in stream])
        print(f"stream       -> {text[:48]!r}... ({stream.result.finish_reason})")

        # 3. a tool call comes back as OpenAI's tool_calls
        call = await gate.chat([{"role": "user", "content": "How many red kettles?"}],
                               tools=TOOLS, max_tokens=100)
        assert call.raw is not None
        (tool_call,) = call.raw["choices"][0]["message"]["tool_calls"]
        print(f"tool call    -> {tool_call['function']['name']}"
              f"({tool_call['function']['arguments']}) finish_reason={call.finish_reason!r}")

        # 4. the official SDK on the gateway's client (its own marker, its own request shape)
        message = await client.messages.create(
            model=MODEL, max_tokens=40,
            system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            messages=[{"role": "user", "content": "Describe a teapot."}],
        )
        print(f"sdk          -> read {message.usage.cache_read_input_tokens:,} cached tokens, "
              f"stop_reason={message.stop_reason!r}")

        # 5. a parameter Anthropic would refuse is refused here, before anything is sent
        try:
            await gate.chat([{"role": "user", "content": "hi"}], logprobs=True)
        except gg.BadRequestError as exc:
            print(f"refused      -> {exc.message.split(';')[0]}")

        stats = gate.stats()["claude"]
    bill = bill_usd(engine.ledger.snapshot(), 3.0, 15.0)
    print(f"ledger       -> ${stats.cost_usd:.4f} for {stats.calls} calls; "
          f"the server billed ${bill:.4f}")


if __name__ == "__main__":
    sim = SimEngine(ANTHROPIC_PROFILE, clock=gg.ScaledClock(TIME_SCALE), seed=1)
    with SimServer(sim, time_scale=TIME_SCALE) as url:
        asyncio.run(main(url.removesuffix("/v1"), sim))
