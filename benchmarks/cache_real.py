"""The prompt-cache gate on a real llama-server: hit rate and time against a plain client.

llama.cpp's server keeps a prompt cache per *slot*: a request is sent to the idle slot whose
last prompt shares the longest prefix with it (``--slot-prompt-similarity``), else to the
least recently used one, and reuses only that slot's cached tokens. Two calls of one prefix
running at once are on two slots: the second prefills the prefix again. This job — ``--prefixes``
long system prompts (cold: each run salts them), ``--questions`` calls each, shuffled — runs
alternately with no scenario (a plain client at the same limit), with ``batch_content`` on
``provider="llamacpp"`` (whose preset knows the per-slot cache: one call per prefix after its
warm-up, no turns, no pacing, the slots split among the prefixes running;
gptgate/cache_slots.py) and with ``batch_content`` on ``provider="openai"`` (the gate's
defaults for a shared prefix cache: warm-up, ramp from 5, prefixes taking turns), and prints
per run the wall time and the token-weighted hit rate the server reported
(``usage.prompt_tokens_details.cached_tokens``).

Start the server first (4 slots, the slow model; prompts of ~1,100 tokens fit its 2,048)::

    PARALLEL=4 MODEL=slow bash ../shared/realserver/start_server.sh 18130
    python benchmarks/cache_real.py --base-url http://127.0.0.1:18130/v1 [--prefixes 4]
                                    [--questions 16] [--words 700] [--rounds 2]

Not in CI (it needs the real server). Times are wall-clock on a shared machine: compare runs
of the same round; the hit rates are the server's and do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import anyio

import gptgate as gg

VOCAB = (
    "alpha", "beta", "gamma", "delta", "river", "mountain", "cloud", "engine", "server",
    "token", "cache", "prefix", "window", "socket", "thread",
)

#: name → (scenario, provider): ``provider="openai"`` at a llama-server keeps the gate's
#: defaults for a shared prefix cache (what ``"llamacpp"`` ran before its ``slot_cache``)
WAYS: dict[str, tuple[str | None, str]] = {
    "plain": (None, "llamacpp"),
    "batch_content": ("batch_content", "llamacpp"),
    "shared defaults": ("batch_content", "openai"),
}


def job(prefixes: int, questions: int, words: int, salt: str) -> list[dict[str, object]]:
    """The shuffled calls: each prefix's system prompt is new to the server (``salt``)."""
    rng = random.Random(7)
    systems = [
        f"Run {salt}. You are assistant number {p}. "
        + " ".join(rng.choice(VOCAB) for _ in range(words))
        for p in range(prefixes)
    ]
    items: list[dict[str, object]] = [
        {"messages": [{"role": "system", "content": systems[p]},
                      {"role": "user", "content": f"Question {q}: what is {rng.choice(VOCAB)}?"}],
         "max_tokens": 16}
        for p in range(prefixes) for q in range(questions)
    ]
    rng.shuffle(items)
    return items


async def run(base_url: str, way: tuple[str | None, str], items: list[dict[str, object]],
              concurrency: int) -> tuple[float, float, int]:
    """(seconds, hit rate, failed calls) of one run."""
    scenario, provider = way
    backend = gg.Backend(name="llama", provider=provider, base_url=base_url, model="m",
                         concurrency=concurrency, timeout=120.0, api_key="none")
    async with gg.Gateway([backend]) as gate:
        start = time.monotonic()
        results = await gate.map(items, scenario=scenario)
        elapsed = time.monotonic() - start
        stats = gate.stats()["llama"]
        failed = sum(isinstance(r, gg.GateError) for r in results)
        return elapsed, stats.cache_hit_rate or 0.0, failed


async def main(args: argparse.Namespace) -> None:
    print(f"{args.prefixes} prefixes x {args.questions} calls, ~{args.words} words each, "
          f"concurrency {args.concurrency}, against {args.base_url}")
    print(f"{'round':>5} {'way':>15} {'seconds':>8} {'hit rate':>9} {'failed':>6}")
    for round_ in range(args.rounds):
        for name, way in WAYS.items():
            items = job(args.prefixes, args.questions, args.words, f"{time.time_ns()}")
            elapsed, hits, failed = await run(args.base_url, way, items, args.concurrency)
            print(f"{round_:>5} {name:>15} {elapsed:>8.1f} {hits:>9.3f} {failed:>6}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--prefixes", type=int, default=4)
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--words", type=int, default=700)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    print(" ".join(["python", *sys.argv]))
    anyio.run(main, parser.parse_args())
