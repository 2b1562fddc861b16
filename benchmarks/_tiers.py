"""Tiered serving (issue 17): ``tier="auto"`` against everything-large and everything-small.

A mixed workload — short asks (capitals, translations, rewrites, taglines) and hard requests
(code, step-by-step reasoning, a long document, a long conversation, JSON extraction, and
short questions that only look simple: arithmetic, letter counting, primality) — arrives as a
seeded Poisson stream at ``--rate`` calls/s over two simulator backends: ``cpu`` (a small model
on a CPU fleet, tier small) and ``tpu`` (the large model, tier large). The workload marks each
request's true difficulty with ``x-sim-difficulty``; gptgate's classifier never sees it. The
small model fails every hard request (``hard_failure_rate=1``): it rambles to ``max_tokens``,
answers empty, cuts its JSON, or — one time in ten — answers wrong with nothing to show it.

A call **succeeds** when it returns a result and is not a hard request answered by the small
model. Columns: successes, cost per successful call (every billed token, escalated first
answers and failures included, over the successes), p50 latency of the answered calls, the
share of hard requests answered by the small model, and (auto) the share of calls escalated.
Target (issue 17): auto's cost ≤ 0.6× everything-large's at ≥ 99 % of its success rate.

A second table runs the same workload on a server whose answers fill ``max_tokens`` (issue
31): every call asks for 16 tokens and both models' answers run far past it, so every answer,
small or large, is cut at ``length``. Escalating a cut small answer buys a large answer cut
the same way: the table shows the share served small, the escalations that changed nothing
(target ≤ 2 % of calls), and cost and success against everything-large (cost ≤ 1×, success
≥ 0.99×). A third runs the first table's requests with a small model that fills every
``max_tokens`` next to a large one that finishes: every small answer is cut, and escalating
it pays — so the rule should go large at once. Virtual time: exact and repeatable per seed.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from dataclasses import dataclass
from typing import Any

import gptgate as gg
from gptgate.sim import PROFILES, LoopClock, SimProfile, run_virtual
from gptgate.testing import sim_backend

#: answers of chat length (the profiles' default, 215 tokens, is a long-form answer): a short
#: ask with max_tokens 200-400 is rarely cut, on either model
_ANSWERS = {"output_tokens_mean": 90.0, "output_tokens_sigma": 0.5}
#: a small model on CPUs: the ``cpu`` profile (1.5B, 4 slots a box), six boxes
SMALL = PROFILES["cpu"].model_copy(update={"replicas": 6, **_ANSWERS})
LARGE = PROFILES["tpu"].model_copy(update=_ANSWERS)
#: models that talk past any cap: with max_tokens set, every answer is cut at it (``length``)
FILLS = {"fills_max_tokens": True}
FILLS_MAX_TOKENS = 16
#: the large model at a hosted price ($1.25 / $10 per M tokens); the small one at a CPU fleet's
#: amortised cost (about 1/25 of it)
LARGE_PRICE = gg.Price(input_per_mtok=1.25, cached_input_per_mtok=0.125, output_per_mtok=10.0)
SMALL_PRICE = gg.Price(input_per_mtok=0.05, output_per_mtok=0.4)

MODES = ("auto", "large", "small")

_COUNTRIES = ["France", "Peru", "Kenya", "Japan", "Norway", "Chile", "Egypt", "Canada"]
_LANGS = ["French", "German", "Spanish", "Italian"]
_PHRASES = ["good morning", "see you tomorrow", "thank you very much", "where is the station"]
_WORDS = ["happy", "quick", "bright", "calm", "strong", "tiny"]
_SENTENCES = [
    "Send me the report now.", "Your order is late again.", "Fix the door today.",
    "We will not refund you.",
]
_ITEMS = ["walnut desk", "rain jacket", "espresso cup", "reading lamp", "canvas tote"]
_ACTIVITIES = ["a hike and a picnic", "a museum day", "a cooking class", "a lake swim"]
_CODE_TASKS = [
    "parses ISO dates from a log file", "merges two sorted lists", "retries an HTTP call",
    "validates an email address",
]
_CODE_LANGS = ["Python", "TypeScript", "Go", "Rust"]
_WHY = [
    "the sky is blue at noon and red at sunset", "ice floats on water",
    "interest rates affect house prices", "a heavier ball does not fall faster",
]
_DOC = (
    "The quarterly review covers revenue, churn, hiring and the product roadmap. Revenue grew "
    "in every region except the north, where two large accounts paused their contracts. "
)
_NOTE = (
    "Met Ana Silva on 3 March about the invoice of 1,250 EUR; Tom Berg joins on 12 April and "
    "will approve the 300 EUR travel budget."
)


@dataclass(frozen=True, slots=True)
class Item:
    kind: str
    hard: bool
    messages: list[dict[str, Any]]
    params: dict[str, Any]


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def _simple(rng: random.Random, n: int) -> Item:
    pick = rng.choice
    kind = pick(["capital", "translate", "synonym", "polite", "tagline", "name"])
    text = {
        "capital": f"What is the capital of {pick(_COUNTRIES)}? (#{n})",
        "translate": f"Translate into {pick(_LANGS)}: '{pick(_PHRASES)}' (#{n})",
        "synonym": f"Give one synonym for '{pick(_WORDS)}'. (#{n})",
        "polite": f"Rewrite more politely: {pick(_SENTENCES)} (#{n})",
        "tagline": f"Write a one-line tagline for a {pick(_ITEMS)}. (#{n})",
        # simple, but says "plan": the heuristic sends it large (a false positive)
        "name": f"Suggest a fun name for our weekend plan: {pick(_ACTIVITIES)}. (#{n})",
    }[kind]
    messages = _user(text)
    if rng.random() < 0.5:
        messages = [{"role": "system", "content": "You are a concise assistant."}, *messages]
    return Item(kind, False, messages, {"max_tokens": pick([200, 256, 300, 400])})


def _hard(rng: random.Random, n: int) -> Item:
    pick = rng.choice
    kind = pick(["code", "why", "document", "conversation", "json", "looks_simple"])
    params: dict[str, Any] = {"max_tokens": pick([300, 400])}
    if kind == "code":
        messages = _user(f"Write a {pick(_CODE_LANGS)} function that {pick(_CODE_TASKS)}. #{n}")
        params["max_tokens"] = pick([400, 800])
    elif kind == "why":
        messages = _user(f"Explain step by step why {pick(_WHY)}. (#{n})")
    elif kind == "document":
        messages = [
            {"role": "system", "content": "Summarise the document for an executive."},
            {"role": "user", "content": _DOC * 60 + f" (#{n}) Summary:"},  # ~2,600 tokens
        ]
    elif kind == "conversation":
        turns = [
            "We plan a trip to Portugal in May.", "Lisbon and Porto are both lovely then.",
            "We have six days and a toddler.", "Shorter transfers would help, then.",
            "My partner gets carsick.", "The train between the two cities is smooth.",
            "We also like beaches.", "The Algarve is warm by late May.",
        ]
        messages = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": t}
            for i, t in enumerate(turns)
        ]
        messages.append({"role": "user", "content": f"So which itinerary fits us best? #{n}"})
    elif kind == "json":
        messages = _user(f"List the people, dates and amounts in this note: {_NOTE} (#{n})")
        params["response_format"] = {"type": "json_object"}
    else:  # short, no signal of difficulty: only escalation can catch the small model here
        a, b = rng.randint(120, 999), rng.randint(120, 999)
        messages = _user(pick([
            f"What is {a} times {b}? (#{n})",
            f"How many letters r are in 'strawberry' repeated {a % 7 + 2} times? (#{n})",
            f"Is {a * b + 1} a prime number? (#{n})",
        ]))
        params["max_tokens"] = 200
    return Item(kind, True, messages, params)


def workload(calls: int, hard_share: float, seed: int) -> list[Item]:
    rng = random.Random(seed)
    return [_hard(rng, n) if rng.random() < hard_share else _simple(rng, n) for n in range(calls)]


def filling(items: list[Item]) -> list[Item]:
    """The same requests, each asking for ``FILLS_MAX_TOKENS`` tokens."""
    return [
        Item(i.kind, i.hard, i.messages, {**i.params, "max_tokens": FILLS_MAX_TOKENS})
        for i in items
    ]


@dataclass(frozen=True, slots=True)
class Run:
    calls: int
    ok: int
    successes: int
    cost_usd: float
    p50_s: float
    hard: int
    hard_on_small: int
    escalated: int
    #: answered by the small tier (escalated calls are not)
    small: int = 0
    #: escalations whose large answer failed the way the small one did
    #: (``tier_stats().escalated_no_change``)
    no_change: int = 0
    #: escalations whose large call failed (the small answer stood)
    escalation_failed: int = 0
    #: the hard requests the small model answered that it got wrong, expected
    #: (:func:`expected_wrong`): ``hard_on_small`` when it fails every hard request
    wrong: float = 0.0

    @property
    def success_rate(self) -> float:
        return self.successes / self.calls

    @property
    def cost_per_success(self) -> float:
        return self.cost_usd / self.successes if self.successes else float("inf")


def natural_cut(profile: SimProfile, max_tokens: int) -> float:
    """The chance that an answer of this model runs past ``max_tokens`` by its length alone
    (the simulator's lognormal answer length, gptgate/sim/text.py ``draw_for``): a cut that
    is no failure — the large model's answer is cut as often."""
    if profile.fills_max_tokens:
        return 1.0
    sigma = profile.output_tokens_sigma
    mu = math.log(profile.output_tokens_mean) - sigma * sigma / 2
    if sigma == 0:
        return float(math.exp(mu) > max_tokens)
    return 1 - statistics.NormalDist().cdf((math.log(max_tokens) - mu) / sigma)


def expected_wrong(
    result: gg.ChatResult, item: Item, small: SimProfile, large: SimProfile | None = None
) -> float:
    """The chance that the small model's answer to a hard request is wrong. The simulator
    decides per request, out of sight (gptgate/sim/difficulty.py): at the model's
    hard-failure rate ``r``, 45% ramble to ``max_tokens``, 45% answer empty, 10% answer wrong
    with nothing to show (a request for JSON: always cut, invalid JSON). What the answer shows
    updates that prior, with ``c`` the chance of a cut by length alone (:func:`natural_cut`):
    empty → wrong; cut at ``length`` → (0.45r·(1 − L) + 0.1rc) / (0.45r + 0.1rc + (1 − r)c);
    a complete answer → 0.1r / (0.1r + 1 − r); JSON that parses → right, that does not →
    r·(1 − L) / (r + (1 − r)c). A cut answer is no failure in itself: the large model's is
    cut as often.

    ``L`` is the chance that the large model's answer to the same request is cut at the same
    ``max_tokens`` (:func:`natural_cut` of ``large``; 0 when not given): a ramble is wrong
    only where the large model would have finished. Where it would be cut too, the two
    answers are the same on the wire — each stopped at the cap the call asked for — and the
    issue counts an escalation from one to the other as one that "bought nothing" (issue 31:
    "the large model, which has the same ``max_tokens`` and is cut the same way"); so a
    success by the rule "succeeds ≥ 99 % as often as everything-large" counts the two alike.
    The silent 10 % stays wrong: its text is wrong whatever its length. Invalid JSON alike:
    wrong only where the large model's JSON would have parsed (``1 − L``) — cut at the cap,
    the large model's is invalid too, everything-large counts it a success, and escalating
    from one to the other changed nothing (family draw 1077: 6.7 of 14 expected wrong)."""
    r = small.hard_failure_rate
    if r <= 0:
        return 0.0
    cap = int(item.params.get("max_tokens") or small.output_tokens_max)
    c = natural_cut(small, cap)
    large_cut = natural_cut(large, cap) if large is not None else 0.0
    if "response_format" in item.params:
        try:
            json.loads(result.text)
        except ValueError:
            return r * (1 - large_cut) / (r + (1 - r) * c)
        return 0.0
    if not result.text.strip():
        return 1.0
    if result.finish_reason == "length":
        rambled, silent = 0.45 * r, 0.1 * r * c
        return (rambled * (1 - large_cut) + silent) / (rambled + silent + (1 - r) * c)
    return 0.1 * r / (0.1 * r + 1 - r)


async def run(
    mode: str,
    items: list[Item],
    rate: float,
    seed: int,
    small_profile: SimProfile = SMALL,
    large_profile: SimProfile = LARGE,
    timeout: float = 120.0,
) -> Run:
    """The workload through ``tier=mode`` on a small and a large backend (the stock ``cpu``
    and ``tpu`` unless given: benchmarks/family.py passes drawn ones)."""
    clock = LoopClock()
    small, _ = sim_backend(
        small_profile, name="cpu", clock=clock, seed=seed, tier="small", price=SMALL_PRICE,
        max_concurrency=64, timeout=timeout,
    )
    large, _ = sim_backend(
        large_profile, name="tpu", clock=clock, seed=seed + 1, tier="large", price=LARGE_PRICE,
        max_concurrency=128, timeout=timeout,
    )
    arrivals = random.Random(seed + 7)
    results: list[gg.ChatResult | gg.GateError | None] = [None] * len(items)
    import anyio

    async with gg.Gateway([small, large], clock=clock, seed=seed) as gate:

        async def one(index: int, item: Item) -> None:
            try:
                results[index] = await gate.chat(
                    item.messages, tier=mode,  # type: ignore[arg-type]
                    extra_headers={"x-sim-difficulty": "hard" if item.hard else "simple"},
                    **item.params,
                )
            except gg.GateError as error:
                results[index] = error

        async with anyio.create_task_group() as group:
            for index, item in enumerate(items):
                group.start_soon(one, index, item)
                await clock.sleep(arrivals.expovariate(rate))
        cost = gate.ledger.total().cost_usd
        tiers = gate.tier_stats()
    answered = [(r, i) for r, i in zip(results, items, strict=True) if isinstance(r, gg.ChatResult)]
    wrong = sum(i.hard and r.backend == "cpu" for r, i in answered)
    return Run(
        calls=len(items),
        ok=len(answered),
        successes=len(answered) - wrong,
        cost_usd=cost,
        p50_s=statistics.median(r.latency_s for r, _ in answered) if answered else float("nan"),
        hard=sum(i.hard for i in items),
        hard_on_small=wrong,
        escalated=tiers.escalated,
        small=sum(r.backend == "cpu" for r, _ in answered),
        no_change=tiers.escalated_no_change,
        escalation_failed=sum(r.escalation_failed for r in tiers.rules.values()),
        wrong=sum(
            expected_wrong(r, i, small_profile, large_profile)
            for r, i in answered
            if i.hard and r.backend == "cpu"
        ),
    )


def table(
    items_of: dict[int, list[Item]], rate: float, small: SimProfile, large: SimProfile
) -> tuple[list[float], list[float], list[float]]:
    """One run per seed and mode, printed; auto's cost and success over everything-large's,
    and its escalations that changed nothing over its calls, per seed."""
    head = (
        f"{'seed':>4} {'tier':<6} {'success':>8} {'vs large':>8} {'$/success':>10} "
        f"{'vs large':>8} {'p50 s':>6} {'hard→small':>10} {'small':>6} {'escalated':>9} "
        f"{'no change':>9}"
    )
    print(head)
    print("-" * len(head))
    cost_ratios: list[float] = []
    success_ratios: list[float] = []
    no_change: list[float] = []
    for seed, items in items_of.items():
        runs = {mode: run_virtual(run, mode, items, rate, seed, small, large) for mode in MODES}
        base = runs["large"]
        for mode, r in runs.items():
            success_vs = r.success_rate / base.success_rate
            cost_vs = r.cost_per_success / base.cost_per_success
            escalated = (
                f"{r.escalated / r.calls:>9.1%} {r.no_change / r.calls:>9.1%}"
                if mode == "auto" else f"{'':>9} {'':>9}"
            )
            print(
                f"{seed:>4} {mode:<6} {r.success_rate:>8.1%} {success_vs:>7.3f}× "
                f"{r.cost_per_success * 1000:>9.4f}m {cost_vs:>7.2f}× {r.p50_s:>6.2f} "
                f"{r.hard_on_small / r.hard:>10.1%} {r.small / r.calls:>6.1%} {escalated}"
            )
        auto = runs["auto"]
        cost_ratios.append(auto.cost_per_success / base.cost_per_success)
        success_ratios.append(auto.success_rate / base.success_rate)
        no_change.append(auto.no_change / auto.calls)
    return cost_ratios, success_ratios, no_change


def verdict(
    cost: list[float], success: list[float], no_change: list[float], max_cost: float
) -> str:
    holds = max(cost) <= max_cost and min(success) >= 0.99 and max(no_change) <= 0.02
    return (
        f"auto vs large: cost {statistics.mean(cost):.3f}× (max {max(cost):.3f}×), success "
        f"{statistics.mean(success):.3f}× (min {min(success):.3f}×), escalations that changed "
        f"nothing max {max(no_change):.1%} of calls — target (cost ≤ {max_cost:g}×, success "
        f"≥ 0.99×, no change ≤ 2%) {'holds' if holds else 'DOES NOT HOLD'}"
    )


def main(calls: int, seeds: list[int], rate: float, hard_share: float) -> int:
    seed_text = ",".join(str(s) for s in seeds)
    print(
        f"$ python benchmarks/routing.py --tiers --calls {calls} --seeds {seed_text} "
        f"--rate {rate:g} --hard-share {hard_share:g}"
    )
    print(
        f"backends cpu (tier small, {SMALL.replicas}×{SMALL.slots} slots, "
        f"${SMALL_PRICE.output_per_mtok}/Mtok out) + tpu (tier large, "
        f"${LARGE_PRICE.output_per_mtok}/Mtok out); Poisson {rate:g} calls/s; "
        f"{hard_share:.0%} hard; virtual time (exact)\n"
    )
    items_of = {seed: workload(calls, hard_share, seed) for seed in seeds}
    ratios = table(items_of, rate, SMALL, LARGE)
    print(f"\n$/success in m$ (thousandths of a dollar). {verdict(*ratios, max_cost=0.6)}")
    print(
        f"\nanswers that fill max_tokens: the same requests with max_tokens={FILLS_MAX_TOKENS}, "
        f"both models talking past it (every answer cut)\n"
    )
    ratios = table(
        {s: filling(i) for s, i in items_of.items()}, rate,
        SMALL.model_copy(update=FILLS), LARGE.model_copy(update=FILLS),
    )
    print(f"\n{verdict(*ratios, max_cost=1.0)}")
    print(
        "\na small model that fills max_tokens next to a large one that finishes: the same "
        "requests as the first table, every small answer cut\n"
    )
    ratios = table(items_of, rate, SMALL.model_copy(update=FILLS), LARGE)
    print(f"\n{verdict(*ratios, max_cost=1.0)}")
    return 0
