"""The prompt-cache gate on a server that caches a prompt per slot (llama.cpp's server).

Measured on a real llama-server (4 slots, 4 cold system prompts of ~1,100 tokens, 16 calls
each, shuffled, concurrency 4; ``python benchmarks/cache_real.py``): a plain client 83.6–86.6 %
hits, ``batch_content`` 74.5 % (three runs) in 1.35× the time — the gate ran one prefix at a
time on all 4 slots, each slot prefilling it once, then the next prefix evicted it from all 4.
``tests/fake_llama_slots.py`` replays that server's slot choice in virtual time.
"""

from __future__ import annotations

import random

import pytest

import gptgate as gg
from gptgate.sim.virtual import LoopClock, run_virtual
from tests.fake_llama_slots import FakeLlamaSlots

WORDS = (
    "alpha", "beta", "gamma", "delta", "river", "mountain", "cloud", "engine", "server",
    "token",
)


def _job(prefixes: int, questions: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    systems = [f"You are assistant {p}. " + " ".join(rng.choice(WORDS) for _ in range(900))
               for p in range(prefixes)]
    items: list[dict[str, object]] = [
        {"messages": [{"role": "system", "content": systems[p]},
                      {"role": "user", "content": f"Question {q}?"}], "max_tokens": 16}
        for p in range(prefixes) for q in range(questions)
    ]
    rng.shuffle(items)
    return items


def _run(
    scenario: str | None, seed: int, prefixes: int = 4, questions: int = 16,
    lanes: int | None = None,
) -> tuple[float, float]:
    """(hit rate, seconds) of the job on a fake 4-slot llama-server prefilling ``lanes``
    prompts at once (None: every slot)."""

    async def main() -> tuple[float, float]:
        clock = LoopClock()
        server = FakeLlamaSlots(clock, slots=4, prefill_lanes=lanes)
        backend = gg.Backend(name="llama", provider="llamacpp", base_url="http://127.0.0.1:9/v1",
                             model="m", concurrency=4, transport=server.transport())
        async with gg.Gateway([backend], clock=clock) as gate:
            start = clock.now()
            results = await gate.map(_job(prefixes, questions, seed), scenario=scenario)
            assert not [r for r in results if isinstance(r, gg.GateError)]
            return server.cached / server.prompt, clock.now() - start

    return run_virtual(main)


@pytest.mark.parametrize("prefixes", [4, 8])
def test_the_gate_does_not_lose_hits_or_time_on_per_slot_caches(prefixes: int) -> None:
    """As many prefixes as slots and twice as many: before, 75.0 % hits in 2.5× the plain
    client's time (the real server: 74.5 %, 1.35–2.4×); now 93.6 % in 0.65–0.82×."""
    for seed in (1, 2, 3):
        plain_hits, plain_s = _run(None, seed, prefixes)
        gate_hits, gate_s = _run("batch_content", seed, prefixes)
        assert gate_hits >= plain_hits + 0.02, (seed, gate_hits, plain_hits)
        assert gate_s <= 0.9 * plain_s, (seed, gate_s, plain_s)


@pytest.mark.parametrize("lanes", [None, 1])
@pytest.mark.parametrize(("prefixes", "questions"), [(1, 16), (1, 200), (2, 16), (3, 16)])
def test_fewer_prefixes_than_slots_are_not_slower_than_a_plain_client(
    prefixes: int, questions: int, lanes: int | None
) -> None:
    """Fewer prefixes than slots: each slot must prefill its prefix once whatever the gate
    does, so a prefix gets the slots it can have to itself from its first call (one prefix
    all four, two prefixes two each, three 2-1-1). Before, a prefix's ramp started at one
    call (after a lone warm-up) and widened in windows: one prefix took 2.25× the plain
    client's time at 16 calls and 1.26× at 200, three prefixes on four slots 1.13×, at the
    same hits; now 1.00–1.04×. With the slots sharing the compute (``lanes=1``: the real
    server on a CPU), before: three prefixes 1.02–1.20×; now 0.76–0.89×."""
    for seed in (1, 2, 3):
        plain_hits, plain_s = _run(None, seed, prefixes, questions, lanes)
        gate_hits, gate_s = _run("batch_content", seed, prefixes, questions, lanes)
        assert gate_hits >= plain_hits - 0.02, (seed, gate_hits, plain_hits)
        assert gate_s <= 1.10 * plain_s, (seed, gate_s, plain_s)
