"""Notebook-style: ``gg.SyncGateway`` in cells of a Jupyter notebook, where an event loop is
already running in the kernel's thread (the place where ``asyncio.run`` and many ``run_sync``
helpers fail with "cannot be called from a running event loop").

What it shows
    * the blocking verbs called from a thread that runs its own event loop, as a notebook cell
      does: ``gate.chat``, ``gate.stream`` (a plain iterator), ``gate.map`` over 40 prompts,
      the sync ``openai.OpenAI`` client on ``gate.http_client(...)``, ``gate.stats()``;
    * the gateway's loop runs in its own background thread, so none of this blocks on the
      kernel's loop, and closing the gateway (or exiting) leaves no thread behind.

How to run
    python examples/notebook_sync.py
    # in Jupyter, paste the cells' bodies into cells: `gate = gg.SyncGateway(...)` once, then
    # `gate.chat(...)` anywhere — no `await`, no `nest_asyncio`

No API key, no network: a simulated GPU server served over HTTP on 127.0.0.1, 20x faster
than real time (the latencies printed are real seconds). Only the simulator runs on the scaled
clock: the gateway keeps real time, as in a notebook against a real endpoint, so its timeouts
are real seconds that a busy laptop cannot mistake for a hung server.
"""

from __future__ import annotations

import asyncio
import threading

import openai

import gptgate as gg
from gptgate.sim import SimServer

SCALE = 20.0
SYSTEM = {"role": "system", "content": "You answer in one short paragraph."}


def ask(text: str) -> list[dict[str, str]]:
    return [SYSTEM, {"role": "user", "content": text}]


async def kernel(base_url: str) -> int:
    """The notebook's kernel: a running event loop; each block below is a cell. Returns how
    many calls the gateway made."""
    # cell 1: one gateway for the notebook
    backend = gg.Backend(name="gpu", base_url=base_url, model="m", concurrency=8,
                         price=gg.Price(input_per_mtok=1.25, output_per_mtok=10.0))
    gate = gg.SyncGateway([backend], seed=1)

    # cell 2: a call, no await
    r = gate.chat(ask("What is a connection pool?"), max_tokens=40)
    print(f"chat      -> {len(r.text.split())} words from {r.backend} in {r.latency_s:.2f} s")

    # cell 3: a streamed answer, printed as it arrives
    with gate.stream(ask("And a keep-alive?"), max_tokens=40) as s:
        pieces = sum(1 for _ in s)
    print(f"stream    -> {pieces} pieces, {s.result.usage.output_tokens} tokens")

    # cell 4: a batch of prompts
    results = gate.map([{"messages": ask(f"fact {i}"), "max_tokens": 20} for i in range(40)],
                       scenario="batch_content")
    ok = sum(isinstance(x, gg.ChatResult) for x in results)
    print(f"map       -> {ok}/40 done")

    # cell 5: the official sync SDK, governed by the same limit
    client = openai.OpenAI(api_key="sk-notebook", base_url=base_url,
                           http_client=gate.http_client("gpu"), max_retries=0)
    reply = client.chat.completions.create(model="m", messages=ask("Hi"), max_tokens=10)  # type: ignore[arg-type]
    print(f"openai    -> {reply.usage.completion_tokens if reply.usage else 0} tokens")

    # cell 6: what it all cost
    stats = gate.stats()["gpu"]
    print(f"stats     -> {stats.calls} calls, {stats.failures} failed, ${stats.cost_usd:.4f}")
    gate.close()
    return stats.calls


def main() -> None:
    with SimServer("gpu", time_scale=SCALE, seed=1) as base_url:
        calls = asyncio.run(kernel(base_url))
    left = [t.name for t in threading.enumerate() if t.name.startswith("gptgate-sync")]
    print(f"from inside a running event loop: {calls} calls, gateway threads left: {len(left)}")


if __name__ == "__main__":
    main()
