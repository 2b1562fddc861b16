"""Token estimates by script: their cost, and what they do to pacing under a TPM limit.

Table 1 — the cost of ``text_chars`` (gptgate/token_scripts.py) on 1 MB of text of each
script, against ``len`` (the old ``len / 4`` rule) and, when the ``bpe-openai`` package is
importable (``pip install bpe-openai``: o200k's vocabulary ships inside it), o200k's own
tokenizer on the same text — what the estimate spares the event loop.

Table 2 — one job of calls in English, Chinese, Japanese, Russian and Hindi on the simulator
(virtual time; ``gpu`` profile under a TPM limit; the simulator counts a prompt with o200k's
rates: gptgate/sim/tokenizer.py), paced by the gateway's estimate *before* (~4 characters a
token for every script) and *after* (each script at its rate). A prompt under-counted is a
reservation too small: the pacer sends more than the minute's budget and the server answers
429s, each a retry and a pause of the backend.

    python benchmarks/token_scripts.py [--calls 300] [--tpm 100000] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gptgate as gg
from gptgate.sim import get_profile, run_virtual
from gptgate.testing import LoopClock, sim_backend
from gptgate.token_scripts import ESTIMATE, text_chars
from tests.scripts_text import PROMPTS

LANGUAGES = ("en", "zh", "ja", "ru", "hi")
MAX_TOKENS = 100


@contextlib.contextmanager
def old_rule() -> Iterator[None]:
    """The estimate before: every character a quarter token, whatever its script."""
    weights = ESTIMATE.weights
    ESTIMATE.weights = (1000,) * len(weights)  # 1/1000 of an ASCII character
    try:
        yield
    finally:
        ESTIMATE.weights = weights


def _ms(func: Callable[[], Any], repeat: int = 10) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def cost_table() -> None:
    try:
        import bpe_openai  # type: ignore[import-not-found]

        o200k: Any = bpe_openai.get_encoding("o200k_base")
    except ImportError:
        o200k = None
    print("| text (1 MB) | len | text_chars | o200k tokenizer |")
    print("|---|---|---|---|")
    for name in (*LANGUAGES, "emoji"):
        text = (PROMPTS[name] * (1_000_000 // len(PROMPTS[name]) + 1))[:1_000_000]
        ours = _ms(lambda t=text: text_chars(t))
        # the tokenizer refuses a 1 MB input: ten slices of 100 KB
        slices = [text[i : i + 100_000] for i in range(0, len(text), 100_000)]
        tokenize = lambda s=slices: [o200k.encode(piece) for piece in s]  # noqa: E731
        real = f"{_ms(tokenize, 2):.0f} ms" if o200k else "—"
        print(f"| {name} | {_ms(lambda t=text: len(t)):.3f} ms | {ours:.1f} ms | {real} |")


def workload(language: str, calls: int) -> list[dict[str, Any]]:
    body = PROMPTS[language] * 6
    return [
        {"messages": [{"role": "user", "content": f"[{i}] {body}"}], "max_tokens": MAX_TOKENS}
        for i in range(calls)
    ]


@dataclass(frozen=True)
class Row:
    language: str
    rule: str
    sim_prompt: float
    estimated: float
    rate_limited: int
    retries: int
    failed: int
    total_s: float


async def run_job(language: str, rule: str, calls: int, tpm: int, concurrency: int) -> Row:
    clock = LoopClock()
    profile = get_profile("gpu").model_copy(update={"tpm": tpm, "rpm": None})
    backend, engine = sim_backend(profile, name="sim", clock=clock, seed=1,
                                  concurrency=concurrency)
    items = workload(language, calls)
    estimated = gg.tokens.estimate_prompt_tokens(items[0]["messages"])
    async with gg.Gateway([backend], clock=clock, seed=1, max_attempts=8) as gate:
        start = clock.now()
        results = await gate.map(items, scenario="batch_content")
        total = clock.now() - start
        retries = gate.stats()["sim"].retries
    ledger = engine.ledger.snapshot()
    ok = [r for r in results if isinstance(r, gg.ChatResult)]
    prompt = ok[0].usage.input_tokens if ok else float("nan")
    return Row(language, rule, prompt, estimated, ledger.rate_limited, retries,
               len(results) - len(ok), total)


def pacing_table(calls: int, tpm: int, concurrency: int) -> list[Row]:
    rows = []
    print(f"\n{calls} calls a language, gpu profile at {tpm:,} TPM, concurrency {concurrency},"
          f" max_tokens {MAX_TOKENS}\n")
    print("| prompt | estimate | sim's tokens | estimated | 429s | retries | failed | job s |")
    print("|---|---|---|---|---|---|---|---|")
    for language in LANGUAGES:
        for rule in ("before", "after"):
            with old_rule() if rule == "before" else contextlib.nullcontext():
                row = run_virtual(run_job, language, rule, calls, tpm, concurrency)
            rows.append(row)
            print(f"| {language} | {rule} | {row.sim_prompt:.0f} | {row.estimated:.0f} | "
                  f"{row.rate_limited} | {row.retries} | {row.failed} | {row.total_s:.1f} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--tpm", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--no-cost", action="store_true", help="skip table 1")
    args = parser.parse_args()
    print("$ python benchmarks/token_scripts.py " + " ".join(sys.argv[1:]) + "\n")
    if not args.no_cost:
        cost_table()
    pacing_table(args.calls, args.tpm, args.concurrency)


if __name__ == "__main__":
    main()
