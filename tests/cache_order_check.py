"""Checks shared by the warm order's tests (tests/test_cache_expiry.py,
tests/test_cache_order_trial.py): on a backend serving its warm groups in order, the head
takes the slots past its share and the other group waits while the limit is taken; and a
family draw's cache job through the gate against the plain client, by the issue's rule."""

from __future__ import annotations

import functools
import operator
import sys
from pathlib import Path

import anyio

from gptgate.cache import CacheGate, PrefixGroup
from gptgate.cache_expiry import MEASURED
from gptgate.clock import Clock
from gptgate.scenarios import RampPolicy

#: a group's prefix tokens in the gate-level order tests
CACHEABLE = 4096


def group(key: str) -> PrefixGroup:
    """Group ``key`` of :data:`CACHEABLE` prefix tokens."""
    return PrefixGroup(key=key, prefix_tokens=CACHEABLE)


async def assert_head_served_first(
    gate: CacheGate, clock: Clock, head: PrefixGroup, other: PrefixGroup, policy: RampPolicy
) -> None:
    """Backend ``b`` at limit 10, both groups warm: 5 calls of each running, then 8 more of
    ``head`` and 3 of ``other`` arrive. The head goes past its share (5) up to the limit,
    ``other``'s calls wait while the limit is taken, and the head's backlog goes first."""
    limit = 10
    running = [await gate.enter("b", head, policy, limit=limit) for _ in range(5)]
    running += [await gate.enter("b", other, policy, limit=limit) for _ in range(5)]
    order: list[str] = []

    async def call(group: PrefixGroup) -> None:
        await gate.enter("b", group, policy, limit=limit)
        order.append(group.key)
        await clock.sleep(1e6)

    h, o = head.key, other.key
    async with anyio.create_task_group() as tg:
        for group in [head] * 8 + [other] * 3:
            tg.start_soon(call, group)
        await clock.sleep(1.0)
        assert order == [h] * 5  # the head past its share, up to the limit
        for t in running[5:]:  # the other's calls end: the limit is still taken
            t.release()
        await clock.sleep(1.0)
        assert order == [h] * 5
        for t in running[:5]:  # the head's first calls end: its backlog first, then the other
            t.release()
        await clock.sleep(1.0)
        assert order == [h] * 8 + [o] * 3
        tg.cancel_scope.cancel()


async def learn_short_lived(
    gate: CacheGate, clock: Clock, policy: RampPolicy, *, limit: int, first: str, then: str,
    cacheable: int,
) -> None:
    """Backend ``b`` learns that its copies expire between a group's calls: group ``first``
    warms up, hits 4 times 1 s apart, then misses after 30 s as often as it takes (expired
    copies); then group ``then`` warms up too. Every call ends before the next."""

    async def one(key: str, cached: int, after_s: float) -> None:
        await clock.sleep(after_s)
        ticket = await gate.enter("b", PrefixGroup(key, cacheable), policy, limit=limit)
        ticket.prefilled()
        ticket.observe(cached_tokens=cached, input_tokens=cacheable + 100)
        ticket.release()

    await one(first, 0, 0.0)  # the warm-up
    for _ in range(4):
        await one(first, cacheable, 1.0)  # hits 1 s apart
    for _ in range(MEASURED):
        await one(first, 0, 30.0)  # misses after 30 s: expired copies
    assert not gate._spreading("b")  # an expiry is not a spill
    await one(then, 0, 0.0)  # the other group warm too


def assert_gate_against_plain(
    draw: int, concurrency: int, *, hits: float, time: float, repeats: int = 1,
    seeds: list[int] | None = None,
) -> None:
    """Family draw ``draw``'s cache job (400 calls over 4 prefixes) through gptgate and the
    plain client at ``concurrency``: none failed, the gate's hit rate at most ``hits`` under
    the plain client's and its time at most ``time`` times the plain client's — pooled over
    ``repeats`` engine seeds ``draw + 10,000 × k``, as benchmarks/family.py's judge pools its
    ``--cache-repeats`` (one seed's time is mostly which long answer starts last); or over
    the engine ``seeds`` given."""
    benchmarks = str(Path(__file__).resolve().parent.parent / "benchmarks")
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)
    from _strategies import Run, job, run_gptgate, run_naive

    from gptgate.sim import family, run_virtual

    server = family(draw)
    items = job(4, 400, draw)
    if seeds is None:
        seeds = [draw + 10_000 * k for k in range(repeats)]
    plain_runs: list[Run] = []
    gate_runs: list[Run] = []
    for seed in seeds:
        plain_runs.append(run_virtual(run_naive, server, [items], concurrency, seed, 100, 3600.0))
        gate_runs.append(run_virtual(
            functools.partial(run_gptgate, timeout=3600.0), server, [items], concurrency, seed
        ))
    plain = functools.reduce(operator.add, plain_runs)
    gate = functools.reduce(operator.add, gate_runs)
    assert gate.failed == plain.failed == 0
    assert gate.hit >= plain.hit - hits, (gate.hit, plain.hit)
    assert gate.total_s <= time * plain.total_s, (gate.total_s, plain.total_s)
