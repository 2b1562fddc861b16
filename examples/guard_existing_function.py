"""``@gate.guard``: put an existing async function under the gateway without rewriting it.

What it shows
    ``summarise`` below is "legacy" code: it posts to ``/chat/completions`` with its own HTTP
    client and returns the JSON. Wrapping it with ``gate.guard(...)`` — no change to its body
    — gives every call the gateway's admission (at most ``concurrency`` at once, by priority),
    retries of server errors under the gateway's policy and retry budget, ``stats()``
    counters, a span, and a ledger entry priced from the ``usage`` the function returns. The
    simulated server here fails 15% of requests with a 5xx: the guard retries them, and the
    caller sees only successes.

How to run
    python examples/guard_existing_function.py

No API key, no network: the function's HTTP client talks to gptgate's simulator in-process,
on a virtual clock (``run_virtual``: simulated seconds cost no wall time).
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx2

import gptgate as gg
from gptgate.sim import FaultPlan, LoopClock, SimEngine, SimTransport, run_virtual

BASE_URL = "http://127.0.0.1:8000/v1"


def legacy_client(transport: httpx2.AsyncBaseTransport) -> httpx2.AsyncClient:
    """How the existing code builds its client (here on the simulator's transport)."""
    return httpx2.AsyncClient(base_url=BASE_URL, transport=transport, timeout=30.0)


async def main() -> None:
    clock = LoopClock()  # the loop's own (virtual) time, for the engine and the gateway
    engine = SimEngine("gpu", clock=clock, seed=3, faults=FaultPlan(seed=3, error_rate=0.15))
    transport = SimTransport(engine)
    client = legacy_client(transport)

    # --- the existing function, unchanged -------------------------------------------------
    async def summarise(ticket: str) -> dict[str, Any]:
        response = await client.post(
            "/chat/completions",
            json={
                "model": "gpt-5.5",
                "messages": [{"role": "user", "content": f"Summarise in one line: {ticket}"}],
                "max_tokens": 40,
            },
        )
        response.raise_for_status()  # a 5xx raises httpx2.HTTPStatusError
        answer: dict[str, Any] = response.json()
        return answer

    # --------------------------------------------------------------------------------------
    backend = gg.Backend(
        name="gpu-sim", base_url=BASE_URL, model="gpt-5.5", hardware="gpu", concurrency=4,
        price=gg.Price(input_per_mtok=1.25, output_per_mtok=10.0), transport=transport,
    )
    gate = gg.Gateway([backend], clock=clock, seed=3)
    # the same as writing @gate.guard(...) above `async def summarise`
    guarded = gate.guard(scenario="batch_content", backend="gpu-sim")(summarise)

    tickets = [f"ticket #{i}: the printer on floor {i % 5} jams on duplex" for i in range(40)]
    answers: list[dict[str, Any]] = []
    async with gate, client:
        async with anyio.create_task_group() as tg:  # all 40 at once: the guard holds 4
            for ticket in tickets:

                async def one(ticket: str = ticket) -> None:
                    answers.append(await guarded(ticket))

                tg.start_soon(one)
        stats = gate.stats()["gpu-sim"]
    server = engine.ledger.snapshot()

    print(f"first answer: {answers[0]['choices'][0]['message']['content'][:60]!r}")
    print(
        f"guarded calls: {len(answers)}/{len(tickets)} succeeded; the server answered "
        f"{server.server_errors} with a 5xx and the guard retried them ({stats.retries} retries)"
    )
    print(
        f"peak in flight at the server: {server.peak_in_flight} (the backend's limit: 4); "
        f"ledger: {stats.input_tokens + stats.output_tokens} tokens, ${stats.cost_usd:.5f}"
    )


if __name__ == "__main__":
    run_virtual(main)
