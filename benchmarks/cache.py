"""Prompt-cache hit rate against concurrency (§2) and the batch policies (§4).

§2 and §4 are the sections of the field report these reproduce (docs/background.md: a cold
prefix's hit rate falls from 87% at 5 concurrent calls to 58% at 50; batching "collect a few,
then send").

Everything runs on the in-process simulator under virtual time (``run_virtual`` + ``LoopClock``):
exact, seeded and repeatable, about a second of CPU per simulated job; the jobs run on
``--workers`` processes (the results do not depend on it). The simulator's billing ledger is
the ground truth: hit rate = cached input tokens / input tokens, retries and abandoned
attempts included.

**§2 workload — one bulk-content job.** 1,000 calls = 10 system prompts × 100 user messages.
Each system prompt is a long style guide (1,500–2,500 tokens, different from its first word,
so each one is its own prefix group and its own routing key); each user message is one product
to write about (40–160 tokens, different from its first word). The list is in prompt order —
what ``for prompt in prompts: for product in products:`` builds — and is sent at concurrency
``c`` in one go. ``max_tokens=1024`` on every call. Both clients send byte-identical bodies.
Each row pools ``--repeats`` such jobs (seeds ``--seed``, ``--seed``+1, …: other prompts, other
messages, other output lengths), because the total time of one job at c=50 (~25 call times)
moves by ±5% with which long answers happen to start last.

* **naive** — a plain ``httpx2.AsyncClient`` on the same ``SimTransport`` and an
  ``anyio.Semaphore(c)``: no warm-up, no ramp, no retries;
* **hand** — the simplest warm-up by hand (issue 14's floor): the same plain client, but each
  prefix's first call is sent alone and the rest of that prefix's calls are released together
  when it returns, under the same ``Semaphore(c)``;
* **gptgate** — ``Gateway([Backend(concurrency=c, transport=SimTransport(engine))])`` and
  ``gate.map(items, scenario="batch_content")``: single-flight warm-up, then the ramp window
  (target 0.85) per prefix group, through the scenario's micro-batcher. ``max_pending`` is the
  job's length (``gate.map``'s default when the scenario ramps reaches that far too), so that
  the map sees every prompt of the job: while one prompt warms up and ramps, the others' calls
  fill the backend. A lookahead of 2 × concurrency items (one prompt's calls) leaves the
  backend idle meanwhile; the line under each table gives that variant too.

Why the naive client loses less than in the field report here: the simulator (like a real server)
caches a prefix as soon as its first call has been *prefilled*, and a semaphore-fed stream
starts a new prompt's calls one by one as slots free up, so only the calls started during that
first prefill (~c × prefill time / call time) miss — plus the whole first burst of the job.

The ceiling is the cacheable share of input: block-aligned prefix tokens (OpenAI: from 1,024
in steps of 128) over input tokens — no client can do better. "Input/call" is the input bill
per call in uncached-token units, cached tokens counted at 25% (a 75% cache discount): this is
what the field report's "mean input tokens billed" measures (its figures imply a factor of ~0.27).

**Two servers**, derived from the stock profiles and printed with their knobs: ``single`` (the
``tpu`` profile: one replica, 128 slots, one prefix cache) and ``overflow`` (the ``hosted``
profile: 4 replicas × 16 slots, prefix-affine routing that spreads a prefix over more replicas
above 15 requests/minute, OpenAI's documented figure, each replica with its own cold cache).
Its random overload failures are switched off and its queue made deep enough for 50 calls, so
that neither client fails: the table is about caching, not error handling.

**Three servers**: also ``spread`` (the simulator profile: 8 replicas × 16 slots, a prefix
spreads above 15 requests/minute, each replica keeps a copy 5 s), a hosted API with
short-lived caches; it also runs the issue's job there: 600 calls over 4 prefixes at c=64.

**The rules printed as holds / DOES NOT HOLD** (issue 14): on every server and setting, the
floor — gptgate's hit rate ≥ the hand client's at every level and its time ≤ the hand
client's (ratio ≤ 1); on a single-replica server ≥ 95% of the ceiling at ≤ 1.25× the naive
client's time; cold bursts on a spreading server ≤ 1.7× the naive time and ≥ 95% of the
ceiling net of one miss per replica the burst spreads to; many prefixes: hit ≥ naive at
≤ 1.05× its time and ≥ 85% of the ceiling. Judged at the highest level, pooled over seeds.

**Cold bursts**: the same calls as 10 separate jobs, one prompt at a time, each job's 100 calls
fired together (``gate.map`` per job), at every level. This is the field report's literal
setting — a burst of simultaneous calls on a cold prefix — where the naive client collapses as
in the field report.
A lone prefix has nothing to overlap its warm-up and ramp with; after the first one, gptgate
starts later prefixes' ramps at the width the backend confirmed (unless it spills prefixes to
cold replicas, where each new prefix must ramp).

**Many prefixes** (KV-cache pressure): the same 1,000 calls over ``--many-prompts`` (50)
system prompts in a shuffled order — a multi-tenant bulk job, each prefix used ~20 times with
other prefixes in between. A prefix then survives between its uses only in the KV blocks the
running sequences leave free (the profiles' ``kv_blocks``, vLLM's automatic prefix caching),
so the more calls run at once, the more prefixes are evicted before their next use. In the
prompt-order job above the prefix in use is held by its running calls and never evicted.

**§4 — a trickling producer.** Items arrive one by one (Poisson, ``--batch-rate`` a second),
each for one of ``--batch-prompts`` system prompts, and are handed to ``gate.submit`` under a
scenario with one of the four batch policies and the default ramp (warm-up + ramp on). Wait =
time in the batcher (submit → flush); time/call = flush → result (cache gate, limiter, the call
itself, retries); cost = input at $2, cached input at $0.50 and output at $8 per million tokens
(ledger, retries included), indexed to real-time. A reference row runs the large policy with
the cache gate off (``ramp=None``).

    python benchmarks/cache.py [--calls 1000] [--prompts 10] [--levels 5,10,20,30,50]
                               [--repeats 5] [--many-prompts 50] [--many-repeats 2]
                               [--spread-calls 600] [--spread-prompts 4]
                               [--spread-c 64] [--spread-repeats 3]
                               [--batch-items 1000] [--batch-rate 3]
                               [--batch-prompts 8] [--batch-concurrency 50] [--seed 7]
                               [--workers 2] [--png PATH]

``--png PATH`` also draws the prompt-cache hit rate against concurrency (naive, hand warm-up,
gptgate; the prompt-order job and the cold bursts, one panel per server, the ceiling dashed)
to ``PATH`` (needs matplotlib).
"""

from __future__ import annotations

import argparse
import functools
import operator
import os
import random
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from _strategies import (
    CACHED_FACTOR,
    MAX_TOKENS,
    Run,
    ceiling,
    job,
    prompts,
    run_gptgate,
    run_hand,
    run_naive,
    shuffled_job,
    user_message,
)

import gptgate as gg
from gptgate.scenarios import BatchPolicy, RampPolicy
from gptgate.sim import LoopClock, SimProfile, get_profile, run_virtual
from gptgate.sim.ledger import LedgerSnapshot
from gptgate.testing import sim_backend

#: $ per million tokens for the §4 cost index: input, cached input, output
PRICE_IN, PRICE_CACHED, PRICE_OUT = 2.0, 0.5, 8.0

PROFILES: dict[str, SimProfile] = {
    "single": get_profile("tpu").model_copy(
        update={"name": "single", "replicas": 1, "prefix_overflow_rpm": None}
    ),
    "overflow": get_profile("hosted").model_copy(
        update={"name": "overflow", "max_queue": 64, "overload_error_rate": 0.0}
    ),
    "spread": get_profile("spread"),
}

# the workload and the clients (naive, hand, gptgate): benchmarks/_strategies.py


def cost_usd(ledger: LedgerSnapshot) -> float:
    uncached = ledger.input_tokens - ledger.cached_input_tokens
    return (
        uncached * PRICE_IN
        + ledger.cached_input_tokens * PRICE_CACHED
        + ledger.output_tokens * PRICE_OUT
    ) / 1e6


# --------------------------------------------------------------------------- §4: one row


@dataclass(frozen=True, slots=True)
class BatchRow:
    name: str
    policy: BatchPolicy
    wait_s: float
    call_s: float
    hit: float
    cost_per_call: float
    failed: int
    retries: int
    total_s: float


async def run_policy(
    profile: SimProfile,
    name: str,
    policy: BatchPolicy,
    *,
    items: int,
    rate: float,
    prompt_count: int,
    concurrency: int,
    seed: int,
    gate_on: bool = True,
) -> BatchRow:
    clock = LoopClock()
    backend, engine = sim_backend(
        profile, name="sim", clock=clock, seed=seed, concurrency=concurrency
    )
    scenario = gg.Scenario(
        name=f"bench-{name}", stream=False, batch=policy, ramp=RampPolicy() if gate_on else None
    )
    systems = prompts(prompt_count, seed + 100)
    rng = random.Random(seed + 200)  # the same arrivals and messages for every policy
    handles = []
    async with gg.Gateway([backend], clock=clock, seed=seed) as gate:
        start = clock.now()
        for i in range(items):
            await clock.sleep(rng.expovariate(rate))
            k = rng.randrange(prompt_count)
            messages = [{"role": "system", "content": systems[k]}, user_message(rng, f"Item {i}")]
            handles.append(
                await gate.submit(messages, scenario=scenario, max_tokens=MAX_TOKENS)
            )
        call_s: list[float] = []
        failed = 0
        for handle in handles:
            try:
                result = await handle
            except gg.GateError:
                failed += 1
            else:
                call_s.append(result.latency_s)
        total = clock.now() - start
        retries = gate.stats()["sim"].retries
    waits = [h.wait_s for h in handles if h.wait_s is not None]
    ledger = engine.ledger.snapshot()
    return BatchRow(
        name=name,
        policy=policy,
        wait_s=sum(waits) / len(waits),
        call_s=sum(call_s) / len(call_s),
        hit=ledger.cache_hit_rate,
        cost_per_call=cost_usd(ledger) / items,
        failed=failed,
        retries=retries,
        total_s=total,
    )


# --------------------------------------------------------------------------- tasks

POLICIES: dict[str, BatchPolicy] = {
    "real-time": BatchPolicy.REALTIME,
    "micro": BatchPolicy.MICRO,
    "small": BatchPolicy.SMALL,
    "large": BatchPolicy.LARGE,
}
#: a reference row: the large policy with the cache gate off (ramp=None)
GATE_OFF = "large, gate off"


@dataclass(frozen=True, slots=True)
class Task:
    """One independent simulation: rebuilt from these fields in whichever process runs it."""

    kind: str  # "job", "bursts", "many" (§2) or "policy" (§4)
    profile: str
    client: str  # "naive" / "gptgate" / "short" (§2: gptgate, short lookahead) or a policy
    c: int
    seed: int


#: the clients without gptgate: a plain semaphore, and the warm-up by hand (the floor)
PLAIN = {"naive": run_naive, "hand": run_hand}


def run_task(task: Task, args: argparse.Namespace) -> Run | BatchRow:
    profile = PROFILES[task.profile]
    if task.kind == "policy":
        label = task.client
        policy = POLICIES["large"] if label == GATE_OFF else POLICIES[label]
        row = functools.partial(
            run_policy,
            items=args.batch_items,
            rate=args.batch_rate,
            prompt_count=args.batch_prompts,
            concurrency=task.c,
            seed=task.seed,
            gate_on=label != GATE_OFF,
        )
        return run_virtual(row, profile, label, policy)
    if task.kind == "many":
        items = shuffled_job(args.many_prompts, args.calls, task.seed)
        if task.client in PLAIN:
            return run_virtual(PLAIN[task.client], profile, [items], task.c, task.seed)
        return run_virtual(run_gptgate, profile, [items], task.c, task.seed)
    if task.kind == "spreadjob":
        items = job(args.spread_prompts, args.spread_calls, task.seed)
        run = PLAIN.get(task.client, run_gptgate)
        return run_virtual(run, profile, [items], task.c, task.seed)
    calls = job(args.prompts, args.calls, task.seed)
    per = args.calls // args.prompts
    jobs = (
        [calls[k * per : (k + 1) * per] for k in range(args.prompts)]
        if task.kind == "bursts"
        else [calls]
    )
    if task.client in PLAIN:
        return run_virtual(PLAIN[task.client], profile, jobs, task.c, task.seed)
    gate = functools.partial(run_gptgate, whole_job_lookahead=task.client != "short")
    return run_virtual(gate, profile, jobs, task.c, task.seed)


def run_all(tasks: list[Task], args: argparse.Namespace) -> dict[Task, Run | BatchRow]:
    """Every task, on ``args.workers`` processes (each task is seeded: same result anywhere)."""
    if args.workers <= 1:
        return {t: run_task(t, args) for t in tasks}
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        results = pool.map(run_task, tasks, [args] * len(tasks), chunksize=1)
        return dict(zip(tasks, results, strict=True))


# --------------------------------------------------------------------------- printing


def knobs(profile: SimProfile) -> str:
    overflow = (
        "never" if profile.prefix_overflow_rpm is None else f"{profile.prefix_overflow_rpm:g}/min"
    )
    return (
        f"{profile.name:<9} replicas={profile.replicas} slots={profile.slots} "
        f"queue={profile.max_queue} prefill={profile.prefill_tokens_per_s:,.0f} tok/s "
        f"step={profile.base_step_s * 1e3:g} ms usl(σ={profile.usl_sigma:g}, "
        f"κ={profile.usl_kappa:g}) prefix spreads above {overflow} cache_ttl="
        f"{profile.cache_ttl_s:g}s overload_errors={profile.overload_error_rate:g} "
        + ("kv=unbounded" if profile.kv_blocks is None else
           f"kv={profile.kv_blocks} blocks × {profile.cache_block_tokens} = "
           f"{profile.kv_tokens:,} tokens/replica")
    )


def verdict(ok: bool) -> str:
    return "holds" if ok else "DOES NOT HOLD"


def _seeds(args: argparse.Namespace) -> list[int]:
    return [args.seed + r for r in range(args.repeats)]


CLIENTS = ("naive", "hand", "gptgate")


def tasks2(args: argparse.Namespace) -> list[Task]:
    hi = max(args.levels)
    tasks = []
    for name in PROFILES:
        for seed in _seeds(args):
            for c in args.levels:
                for kind in ("job", "bursts"):
                    tasks += [Task(kind, name, client, c, seed) for client in CLIENTS]
            tasks += [Task("job", name, "short", hi, seed)]
        for seed in _seeds(args)[: args.many_repeats]:
            for c in args.levels:
                tasks += [Task("many", name, client, c, seed) for client in CLIENTS]
    for seed in _spread_seeds(args):
        tasks += [Task("spreadjob", "spread", cl, args.spread_c, seed) for cl in CLIENTS]
    return tasks


def _spread_seeds(args: argparse.Namespace) -> list[int]:
    return [args.seed + r for r in range(args.spread_repeats)]


def tasks4(args: argparse.Namespace) -> list[Task]:
    return [
        Task("policy", name, label, args.batch_concurrency, args.seed)
        for name in PROFILES
        for label in [*POLICIES, GATE_OFF]
    ]


def spread_misses(profile: SimProfile, calls: int) -> int:
    """Replicas a burst of ``calls`` calls on one prefix reaches (one cold miss each): the
    server spreads a prefix at its 16th, 31st, 46th… call in a minute (``overflow_rpm`` 15)."""
    if profile.replicas == 1 or profile.prefix_overflow_rpm is None:
        return 1
    return min(profile.replicas, 1 + (calls - 1) // int(profile.prefix_overflow_rpm))


def comparison(
    args: argparse.Namespace, done: dict[Task, Any], kind: str, seeds: list[int], top: float,
    *, levels: Sequence[int] | None = None, profiles: Sequence[str] | None = None,
    per_prefix: int = 0,
) -> None:
    """Naive, hand warm-up and gptgate per profile and concurrency level, then issue 14's
    rules at the highest level. ``top`` is the ceiling: the best hit rate any client can
    reach; ``per_prefix`` the calls per prefix of one burst (cold bursts)."""
    runs = len(seeds)
    levels = list(levels or args.levels)
    hi, base = max(levels), min(levels)
    for name in profiles or PROFILES:
        profile = PROFILES[name]

        def pooled(client: str, c: int, name: str = name) -> Run:
            parts: list[Run] = [done[Task(kind, name, client, c, seed)] for seed in seeds]
            return functools.reduce(operator.add, parts)

        rows = {cl: {c: pooled(cl, c) for c in levels} for cl in CLIENTS}
        naive, hand, gate = rows["naive"], rows["hand"], rows["gptgate"]
        head = (f"{'c':>3} | {'naive hit':>9} {'input/call':>10} {'time':>6} | "
                f"{'hand hit':>8} {'time':>6} {'vs naive':>8} | {'gptgate hit':>11} "
                f"{'input/call':>10} {'vs c=' + str(base):>8} {'time':>6} {'vs naive':>8} "
                f"{'vs hand':>7}")
        print(f"\n### {name}\n{head}\n{'-' * len(head)}")
        for c in levels:
            n, h, g = naive[c], hand[c], gate[c]
            note = ""
            if any(r.failed or r.requests != r.calls for r in (n, h, g)):
                note = (f"  (failed {n.failed}/{h.failed}/{g.failed}; requests per call "
                        f"{n.requests / n.calls:.3f}/{h.requests / h.calls:.3f}/"
                        f"{g.requests / g.calls:.3f})")
            print(
                f"{c:>3} | {n.hit:>9.1%} {n.input_per_call:>10.0f} {n.total_s / runs:>5.0f}s | "
                f"{h.hit:>8.1%} {h.total_s / runs:>5.0f}s {h.total_s / n.total_s:>7.2f}x | "
                f"{g.hit:>11.1%} {g.input_per_call:>10.0f} "
                f"{g.input_per_call / gate[base].input_per_call - 1:>+8.1%} "
                f"{g.total_s / runs:>5.0f}s {g.total_s / n.total_s:>7.2f}x "
                f"{g.total_s / h.total_s:>6.2f}x{note}"
            )
        n, h, g = naive[hi], hand[hi], gate[hi]
        t = g.total_s / n.total_s
        print(f"rules at c={hi}:")
        floor_hit = all(gate[c].hit >= hand[c].hit for c in levels)
        floor_time = max(gate[c].total_s / hand[c].total_s for c in levels)
        print(f"  floor — gptgate never worse than the hand warm-up: hit at every level "
              f"{verdict(floor_hit)}; time at most {floor_time:.3f}× the hand client's "
              f"(≤ 1×): {verdict(floor_time <= 1.0)}")
        if kind == "many":
            print(f"  gptgate hit {g.hit:.1%} ≥ naive {n.hit:.1%}: {verdict(g.hit >= n.hit)}; "
                  f"time {t:.2f}× naive ≤ 1.05×: {verdict(t <= 1.05)}; {g.hit / top:.1%} of "
                  f"the ceiling ≥ 85%: {verdict(g.hit >= 0.85 * top)}")
        elif profile.replicas == 1:
            print(f"  single replica — gptgate {g.hit / top:.1%} of the ceiling ≥ 95%: "
                  f"{verdict(g.hit >= 0.95 * top)}; time {t:.2f}× naive ≤ 1.25×: "
                  f"{verdict(t <= 1.25)}")
        elif kind == "bursts":
            spread = spread_misses(profile, per_prefix)
            net = top * (1 - spread / per_prefix)
            print(f"  spreading server, cold bursts — time {t:.2f}× naive ≤ 1.7×: "
                  f"{verdict(t <= 1.7)}; hit {g.hit:.1%} = {g.hit / net:.1%} of the ceiling "
                  f"net of one miss per replica spread to ({spread} of {per_prefix} calls: "
                  f"{net:.1%}), ≥ 95%: {verdict(g.hit >= 0.95 * net)}")
        else:
            print(f"  (spreading server, one job: gptgate {g.hit / top:.1%} of the ceiling at "
                  f"{t:.2f}× naive; judged by the floor)")
        if kind == "job" and hi in args.levels and name in PROFILES:
            short = pooled("short", hi)
            print(f"  (with gate.map's lookahead cut to 2 × concurrency items instead of the "
                  f"whole job: hit {short.hit:.1%}, time {short.total_s / n.total_s:.2f}× naive)")


def section2(args: argparse.Namespace, done: dict[Task, Any]) -> None:
    seeds = _seeds(args)
    runs = len(seeds)
    top = ceiling([m for seed in seeds for m in job(args.prompts, args.calls, seed)])
    per = args.calls // args.prompts
    print(f"## §2 hit rate against concurrency — {args.calls} calls = {args.prompts} system "
          f"prompts × {per} user messages, in prompt order, as one job; each row = {runs} "
          f"such jobs (seeds {seeds[0]}–{seeds[-1]}) pooled, time per job")
    print(f"ceiling (block-aligned prefix / input): {top:.1%}; input/call = billed input "
          f"tokens per call, cached at {CACHED_FACTOR:.0%}; times in simulated seconds\n")
    for profile in PROFILES.values():
        print(knobs(profile))
    comparison(args, done, "job", seeds, top)
    print(f"\n## cold bursts (the field report's setting) — the same calls as {args.prompts} "
          f"jobs of {per}, one prompt at a time, each job's calls fired at once; time for all "
          f"{args.prompts} jobs")
    comparison(args, done, "bursts", seeds, top, per_prefix=per)


def section_many(args: argparse.Namespace, done: dict[Task, Any]) -> None:
    seeds = _seeds(args)[: args.many_repeats]
    top = ceiling([m for seed in seeds for m in shuffled_job(args.many_prompts, args.calls, seed)])
    print(f"\n## many prefixes (KV-cache pressure) — {args.calls} calls over "
          f"{args.many_prompts} system prompts, shuffled, as one job; each row = {len(seeds)} "
          f"job(s) (seeds {seeds[0]}–{seeds[-1]}); ceiling {top:.1%} (first use of each prefix "
          "included as cacheable); kv blocks/replica: "
          + ", ".join(f"{name} {p.kv_blocks}" for name, p in PROFILES.items()))
    comparison(args, done, "many", seeds, top)


def section_spread(args: argparse.Namespace, done: dict[Task, Any]) -> None:
    seeds = _spread_seeds(args)
    top = ceiling([m for s in seeds for m in job(args.spread_prompts, args.spread_calls, s)])
    print(f"\n## the hosted-API-like job (issue 14) — {args.spread_calls} calls over "
          f"{args.spread_prompts} shared prefixes, in prompt order, as one job at "
          f"c={args.spread_c} on the spread server; each row = {len(seeds)} jobs (seeds "
          f"{seeds[0]}–{seeds[-1]}) pooled; ceiling {top:.1%}")
    comparison(args, done, "spreadjob", seeds, top, levels=[args.spread_c],
               profiles=["spread"])


def section4(args: argparse.Namespace, done: dict[Task, Any]) -> None:
    print(f"\n## §4 batch policies — a trickling producer: {args.batch_items} items, Poisson at "
          f"{args.batch_rate:g}/s, {args.batch_prompts} system prompts, backend concurrency "
          f"{args.batch_concurrency}, gate.submit with warm-up + ramp on")
    print(f"wait = submit → flush; time/call = flush → result; cost: ${PRICE_IN:g} in, "
          f"${PRICE_CACHED:g} cached, ${PRICE_OUT:g} out per M tokens (ledger, retries "
          "included), per call, indexed to real-time")
    for name in PROFILES:
        rows: list[BatchRow] = [
            done[Task("policy", name, label, args.batch_concurrency, args.seed)]
            for label in [*POLICIES, GATE_OFF]
        ]
        head = (f"{'policy':<16} {'flush rule':<17} {'wait':>6} {'time/call':>9} "
                f"{'cache hit':>9} {'cost index':>10} {'retries':>7} {'failed':>6}")
        print(f"\n### {name}\n{head}\n{'-' * len(head)}")
        base = rows[0].cost_per_call
        for r in rows:
            rule = ("1" if r.policy.max_size == 1 else
                    f"{r.policy.max_size} items or {r.policy.max_wait_s:g} s")
            print(f"{r.name:<16} {rule:<17} {r.wait_s:>5.1f}s {r.call_s:>8.2f}s "
                  f"{r.hit:>9.1%} {r.cost_per_call / base:>10.3f} {r.retries:>7} {r.failed:>6}")


#: the field report's hit rate against concurrency (a hosted API, a burst on a cold prefix):
#: the shape the cold-burst panels compare to
FIELD_HIT = {5: 0.87, 10: 0.84, 20: 0.78, 30: 0.71, 50: 0.58}


def plot_png(args: argparse.Namespace, done: dict[Task, Any], path: str) -> None:
    """Hit rate against concurrency, one column per server, rows: the prompt-order job and the
    cold bursts (the §2 sections above, pooled over the same seeds)."""
    import matplotlib  # lazily: the tables need no plotting library

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = _seeds(args)
    top = ceiling([m for seed in seeds for m in job(args.prompts, args.calls, seed)])
    kinds = {"job": "one job, prompt order", "bursts": "cold bursts (one prompt at a time)"}
    fig, axes = plt.subplots(
        len(kinds), len(PROFILES), figsize=(4 * len(PROFILES), 3.2 * len(kinds)),
        sharex=True, sharey=True, squeeze=False,
    )
    for row, (kind, title) in enumerate(kinds.items()):
        for col, name in enumerate(PROFILES):
            ax = axes[row][col]
            for client, style in (("naive", "o-"), ("hand", "s--"), ("gptgate", "^-")):
                hits = [
                    functools.reduce(
                        operator.add, [done[Task(kind, name, client, c, s)] for s in seeds]
                    ).hit
                    for c in args.levels
                ]
                ax.plot(args.levels, [100 * h for h in hits], style, label=client, lw=1.3)
            ax.axhline(100 * top, color="grey", ls=":", label="ceiling")
            if kind == "bursts":
                ax.plot(list(FIELD_HIT), [100 * h for h in FIELD_HIT.values()], "x",
                        color="black", label="field report")
            ax.set_title(f"{name}: {title}", fontsize=9)
            ax.grid(alpha=0.3)
            if row == len(kinds) - 1:
                ax.set_xlabel("concurrency")
            if col == 0:
                ax.set_ylabel("prompt-cache hit rate (%)")
    axes[0][0].legend(fontsize=8, loc="lower left")
    axes[-1][0].legend(fontsize=8, loc="lower left")
    fig.suptitle(f"{args.calls} calls over {args.prompts} system prompts, "
                 f"{len(seeds)} seed(s) pooled (simulated)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls per §2 job")
    parser.add_argument("--prompts", type=int, default=10, help="system prompts per §2 job")
    parser.add_argument("--levels", default="5,10,20,30,50", help="§2 concurrency levels")
    parser.add_argument("--repeats", type=int, default=5, help="§2 jobs (seeds) per row")
    parser.add_argument("--many-prompts", type=int, default=50,
                        help="system prompts of the shuffled many-prefix job")
    parser.add_argument("--many-repeats", type=int, default=2,
                        help="many-prefix jobs (the first seeds) per row")
    parser.add_argument("--spread-calls", type=int, default=600,
                        help="calls of the hosted-API-like job on the spread server")
    parser.add_argument("--spread-prompts", type=int, default=4)
    parser.add_argument("--spread-c", type=int, default=64)
    parser.add_argument("--spread-repeats", type=int, default=3)
    parser.add_argument("--batch-items", type=int, default=1000)
    parser.add_argument("--batch-rate", type=float, default=3.0, help="§4 items per second")
    parser.add_argument("--batch-prompts", type=int, default=8)
    parser.add_argument("--batch-concurrency", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes (results do not depend on it)")
    parser.add_argument("--png", default=None, metavar="PATH",
                        help="also write the hit-rate plot of the §2 sections (matplotlib)")
    args = parser.parse_args(argv)
    args.levels = [int(x) for x in args.levels.split(",")]
    wall = time.perf_counter()
    done = run_all(tasks2(args) + tasks4(args), args)
    print(f"$ python benchmarks/cache.py --calls {args.calls} --prompts {args.prompts} "
          f"--levels {','.join(map(str, args.levels))} --repeats {args.repeats} "
          f"--many-prompts {args.many_prompts} --many-repeats {args.many_repeats} "
          f"--spread-calls {args.spread_calls} --spread-prompts {args.spread_prompts} "
          f"--spread-c {args.spread_c} --spread-repeats {args.spread_repeats} "
          f"--batch-items {args.batch_items} --batch-rate {args.batch_rate:g} "
          f"--batch-prompts {args.batch_prompts} --batch-concurrency "
          f"{args.batch_concurrency} --seed {args.seed}"
          + (f" --png {args.png}" if args.png else "") + "\n")
    section2(args, done)
    section_many(args, done)
    section_spread(args, done)
    section4(args, done)
    if args.png:
        plot_png(args, done, args.png)
        print(f"\n(plot written to {args.png})")
    print(f"\n(wall time {time.perf_counter() - wall:.0f}s on {args.workers} process(es))")


if __name__ == "__main__":
    main()
