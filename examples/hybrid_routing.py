"""Hybrid routing over TPU, GPU and CPU backends: load spreading, a private call, model tiers.

What it shows
    Three simulated backends behind one gateway:

    * ``tpu-cloud``  — hosted TPUs, the large model, the highest price;
    * ``gpu-onprem`` — your own GPUs, the large model, ``private=True`` (compliance: data
      that must not leave goes only to backends marked private);
    * ``cpu-edge``   — a small model on CPUs (``tier="small"``), very cheap, 4 slots.

    1. a burst of ``tier="large"`` calls is spread over both large backends by predicted
       completion time (queue ahead / limit x observed service time, plus a cost term);
    2. ``private=True`` calls land on ``gpu-onprem`` only, whatever the load elsewhere;
    3. ``tier="auto"`` (the default) sends short asks to the small model and code or
       reasoning to the large one; ``r.tier_reason`` says which rule decided, and a small
       answer that looks failed is asked again, once, of the large model (``r.escalated``).

How to run
    python examples/hybrid_routing.py

No API key, no network: three in-process simulators on a virtual clock (``run_virtual``).
"""

from __future__ import annotations

import asyncio
from collections import Counter

import gptgate as gg
from gptgate.sim import LoopClock, SimEngine, SimTransport, run_virtual

LARGE_PRICE = gg.Price(input_per_mtok=1.25, cached_input_per_mtok=0.125, output_per_mtok=10.0)
ONPREM_PRICE = gg.Price(input_per_mtok=0.6, output_per_mtok=4.0)  # amortised hardware cost
SMALL_PRICE = gg.Price(input_per_mtok=0.05, output_per_mtok=0.4)


def backends(clock: LoopClock) -> list[gg.Backend]:
    def sim(profile: str, seed: int) -> SimTransport:
        return SimTransport(SimEngine(profile, clock=clock, seed=seed))

    return [
        gg.Backend(name="tpu-cloud", base_url="https://tpu.example.com/v1", model="gpt-5.5",
                   hardware="tpu", tier="large", price=LARGE_PRICE, transport=sim("tpu", 1)),
        gg.Backend(name="gpu-onprem", base_url="http://gpu.internal:8000/v1", model="gpt-5.5",
                   hardware="gpu", tier="large", private=True, price=ONPREM_PRICE,
                   transport=sim("gpu", 2)),
        gg.Backend(name="cpu-edge", base_url="http://edge.internal:8080/v1",
                   model="qwen2.5-1.5b", hardware="cpu", tier="small", price=SMALL_PRICE,
                   transport=sim("cpu", 3)),
    ]


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def main() -> None:
    clock = LoopClock()
    async with gg.Gateway(backends(clock), clock=clock, seed=4) as gate:
        # 1. a burst of large-model calls: spread over the two large backends
        burst = await asyncio.gather(*(
            gate.chat(user(f"Draft reply #{i} to a customer."), tier="large", max_tokens=80)
            for i in range(80)
        ))
        print(f"tier='large' burst of {len(burst)}: {dict(Counter(r.backend for r in burst))}")

        # 2. private calls: only a private backend may see them
        private = await asyncio.gather(*(
            gate.chat(user(f"Summarise patient record {i}."), private=True, max_tokens=60)
            for i in range(20)
        ))
        where = Counter(r.backend for r in private)
        print(f"private=True x{len(private)}: {dict(where)}")
        assert set(where) == {"gpu-onprem"}, where

        # 3. tier="auto": the classifier picks the model per call
        asks = [
            "What is the capital of Peru?",
            "Translate 'good morning' into French.",
            "Suggest a name for a bakery.",
            "Write a Python function that merges two sorted lists.",
            "Explain step by step why ice floats on water.",
            "Give a synonym for 'quick'.",
        ]
        tiered = [await gate.chat(user(ask), max_tokens=120) for ask in asks]
        for ask, r in zip(asks, tiered, strict=True):
            escalated = ", small answer looked failed: asked again" if r.escalated else ""
            print(f"tier='auto': {ask[:44]!r:<48} -> {r.tier:<5} ({r.tier_reason}{escalated}) "
                  f"on {r.backend}, ${r.cost_usd:.6f}")

        print("per backend:")
        for name, s in gate.stats().items():
            print(f"  {name:<10} {s.hardware}: {s.calls:>3} calls, limit {s.limit:>2}, "
                  f"p50 {s.latency_p50_s or 0.0:.2f}s, ${s.cost_usd:.4f}")


if __name__ == "__main__":
    run_virtual(main)
