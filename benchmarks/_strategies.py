"""The prompt-cache job and the three ways to send it, shared by benchmarks/cache.py and
benchmarks/family.py: one copy, so that both judge gptgate against the same simple clients.

* the job — calls over a few long system prompts (1,500–2,500 tokens each, one prefix group
  apiece), each with a short user message, in prompt order (:func:`job`) or shuffled;
* **naive** — a plain ``httpx2.AsyncClient`` under one ``anyio.Semaphore(c)``;
* **hand** — the simplest warm-up by hand: each prefix's first call alone, the rest of its calls
  released together when it returns, under the same semaphore;
* **gptgate** — ``gate.map(..., scenario="batch_content")`` on a backend of concurrency ``c``.

The plain clients send once by default (benchmarks/cache.py's servers never refuse); with
``attempts`` > 1 they retry a 429/5xx after its ``retry-after`` (1 s without one), as the
simplest client a user writes for a server that refuses (benchmarks/family.py). A call not
answered within ``timeout_s`` fails, as httpx's timeout would on a real server.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2

import gptgate as gg
from gptgate.cache import cacheable_tokens
from gptgate.results import ChatResult
from gptgate.sim import LoopClock, SimEngine, SimProfile, SimTransport
from gptgate.sim.ledger import LedgerSnapshot
from gptgate.testing import sim_backend
from gptgate.tokens import estimate_prompt_tokens

Messages = list[dict[str, str]]

MAX_TOKENS = 1024
#: the plain clients' httpx timeout (a non-streamed answer: the whole call)
PLAIN_TIMEOUT_S = 600.0
#: cached input is billed at this share of the input price (a 75% discount)
CACHED_FACTOR = 0.25

# --------------------------------------------------------------------------- the workload

_WORDS = [
    "brand", "voice", "audience", "tone", "claim", "length", "format", "headline", "bullet",
    "benefit", "feature", "material", "warranty", "care", "sizing", "shipping", "price", "colour",
    "fabric", "finish", "origin", "season", "gift", "style", "fit", "weight", "texture", "pattern",
    "comfort", "durable", "eco", "recycled", "premium",
]


def _text(rng: random.Random, tokens: int, head: str) -> str:
    """``head`` then random words: exactly ``4 × tokens`` characters."""
    words = [head]
    size = len(head)
    while size < 4 * tokens:
        word = rng.choice(_WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[: 4 * tokens]


def prompts(count: int, seed: int, tokens: int | None = None) -> list[str]:
    """``count`` system prompts of 1,500–2,500 tokens (or exactly ``tokens``)."""
    rng = random.Random(seed)
    return [
        _text(
            rng,
            (tokens or rng.randint(1500, 2500)) - 4,
            f"Style guide {k}, brand {rng.randrange(10**6)}:",
        )
        for k in range(count)
    ]


def user_message(rng: random.Random, label: str) -> dict[str, str]:
    return {"role": "user", "content": _text(rng, rng.randint(40, 160) - 4, f"{label}:")}


def shuffled_job(prompt_count: int, calls: int, seed: int) -> list[Messages]:
    """:func:`job`'s calls in a seeded random order (the prefixes interleave)."""
    items = job(prompt_count, calls, seed)
    random.Random(seed + 3).shuffle(items)
    return items


def job(
    prompt_count: int, calls: int, seed: int, prompt_tokens: int | None = None
) -> list[Messages]:
    """``calls`` calls over ``prompt_count`` system prompts, in prompt order."""
    rng = random.Random(seed + 1)
    systems = prompts(prompt_count, seed, prompt_tokens)
    per = [calls // prompt_count + (k < calls % prompt_count) for k in range(prompt_count)]
    return [
        [{"role": "system", "content": systems[k]}, user_message(rng, f"Product {k}.{i}")]
        for k in range(prompt_count)
        for i in range(per[k])
    ]


def ceiling(items: Sequence[Messages]) -> float:
    """Block-aligned prefix tokens over input tokens: the best hit rate any client can get."""
    cacheable = sum(
        cacheable_tokens(estimate_prompt_tokens(m[:-1]), estimate_prompt_tokens(m)) for m in items
    )
    return cacheable / sum(estimate_prompt_tokens(m) for m in items)


# --------------------------------------------------------------------------- §2: one row


@dataclass(frozen=True, slots=True)
class Run:
    """One or more jobs' totals (repeats are summed)."""

    calls: int
    input_tokens: int
    cached_tokens: int
    total_s: float
    failed: int
    requests: int

    @property
    def hit(self) -> float:
        return self.cached_tokens / self.input_tokens

    @property
    def input_per_call(self) -> float:
        uncached = self.input_tokens - self.cached_tokens
        return (uncached + CACHED_FACTOR * self.cached_tokens) / self.calls

    def __add__(self, other: Run) -> Run:
        return Run(
            self.calls + other.calls,
            self.input_tokens + other.input_tokens,
            self.cached_tokens + other.cached_tokens,
            self.total_s + other.total_s,
            self.failed + other.failed,
            self.requests + other.requests,
        )


def _run(ledger: LedgerSnapshot, calls: int, total_s: float, failed: int) -> Run:
    return Run(
        calls=calls,
        input_tokens=ledger.input_tokens,
        cached_tokens=ledger.cached_input_tokens,
        total_s=total_s,
        failed=failed,
        requests=ledger.requests,
    )




Call = Callable[[Messages], Coroutine[Any, Any, None]]


async def _plain_client(
    profile: SimProfile,
    jobs: list[list[Messages]],
    c: int,
    seed: int,
    attempts: int = 1,
    timeout_s: float = PLAIN_TIMEOUT_S,
    *,
    send_job: Callable[[Call, list[Messages]], Awaitable[None]],
) -> Run:
    """A client without gptgate: plain calls under one ``Semaphore(c)``; ``send_job`` decides
    how one job's calls are released. A refused call (429/5xx) is sent again after its
    ``retry-after`` (1 s without one), up to ``attempts`` sends in all, its permit released
    while it waits; a call not answered within ``timeout_s`` fails."""
    clock = LoopClock()
    engine = SimEngine(profile, clock=clock, seed=seed)
    semaphore = anyio.Semaphore(c)
    failed = 0

    async with httpx2.AsyncClient(
        transport=SimTransport(engine), base_url="http://sim/v1", timeout=timeout_s
    ) as client:

        async def call(messages: Messages) -> None:
            nonlocal failed
            body = {"model": profile.model, "messages": messages, "max_tokens": MAX_TOKENS}
            # built once, sent as often as refused (``client.post`` would serialise the long
            # prompt and parse the URL again for each resend: the same bytes every time)
            request = client.build_request("POST", "chat/completions", json=body)
            for attempt in range(attempts):
                status, wait = 0, 1.0  # 0: timed out (not retried, like httpx's timeout error)
                async with semaphore:
                    # httpx's timeout, which an in-process transport does not enforce
                    with anyio.move_on_after(timeout_s):
                        response = await client.send(request)
                        status = response.status_code
                        wait = float(response.headers.get("retry-after", 1.0))
                if not (status == 429 or status >= 500) or attempt == attempts - 1:
                    break
                await clock.sleep(wait)
            failed += status != 200

        start = clock.now()
        for items in jobs:
            await send_job(call, items)
        total = clock.now() - start
    return _run(engine.ledger.snapshot(), sum(map(len, jobs)), total, failed)


async def _all_at_once(call: Call, items: list[Messages]) -> None:
    async with anyio.create_task_group() as tg:
        for messages in items:
            tg.start_soon(call, messages)


async def _first_of_each_prefix_alone(call: Call, items: list[Messages]) -> None:
    async def prefix(calls: list[Messages]) -> None:
        await call(calls[0])
        await _all_at_once(call, calls[1:])

    groups: dict[str, list[Messages]] = {}
    for messages in items:
        groups.setdefault(repr(messages[:-1]), []).append(messages)
    async with anyio.create_task_group() as tg:
        for calls in groups.values():
            tg.start_soon(prefix, calls)


#: the plain client: every call of a job released at once, under one ``Semaphore(c)``
run_naive = functools.partial(_plain_client, send_job=_all_at_once)
#: the simplest warm-up by hand (issue 14's floor): per prefix, its first call alone, the rest
#: of its calls released together when it returns, all under one ``Semaphore(c)``
run_hand = functools.partial(_plain_client, send_job=_first_of_each_prefix_alone)


async def run_gptgate(
    profile: SimProfile,
    jobs: list[list[Messages]],
    c: int,
    seed: int,
    *,
    whole_job_lookahead: bool = True,
    timeout: float = 60.0,
) -> Run:
    clock = LoopClock()
    backend, engine = sim_backend(
        profile, name="sim", clock=clock, seed=seed, concurrency=c, timeout=timeout
    )
    failed = 0
    async with gg.Gateway([backend], clock=clock, seed=seed) as gate:
        start = clock.now()
        for items in jobs:
            results = await gate.map(
                ({"messages": m, "max_tokens": MAX_TOKENS} for m in items),
                scenario="batch_content",
                max_pending=len(items) if whole_job_lookahead else 2 * c,
            )
            failed += sum(not isinstance(r, ChatResult) for r in results)
        total = clock.now() - start
    return _run(engine.ledger.snapshot(), sum(map(len, jobs)), total, failed)
