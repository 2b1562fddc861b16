"""The cache gate on a server that caches each prompt in the slot that ran it.

llama.cpp's server gives a request the idle slot whose last prompt it shares most with, and
reuses only that slot's cache: two calls of one prefix at once run on two slots, and the second
prefills the prefix again. The gate's defaults assume a cache the server's sequences share
(vLLM, SGLang, hosted APIs): after the warm-up it lets ``start`` calls of the prefix go at once
and has prefixes take turns, so a job's prefix ran on every slot at once — each slot prefilling
it — and the next prefix then evicted it from all of them. On a real 4-slot llama-server
(``python benchmarks/cache_real.py``) that was 74.5 % hits against a plain client's 84–87 %,
in 1.35–2.4× the time. Here a prefix ramps from one call after its warm-up, and prefixes run
side by side: 92.6 %, 0.58× the time of the plain client. Nor are a group's calls paced as on
a server that spreads hot prefixes over cold replicas: the slot a widening ramp spilled to
keeps the prefix, as a replica would.

While several prefixes run, each has the slots it can have to itself — the limit split among
them (``slot_shares``: three on four slots 2-1-1) — and takes a slot another one left only
when its calls left would take longer than a prefill (``worth_a_slot``): a ramp from one call
that took every slot left over made three prefixes on four slots 1.13× the plain client's
time. A lone prefix sends a second call with its warm-up (``pair_with_warmup``) and takes a
slot cold for it only when that pays (``worth_a_slot`` with ``stalls``); where the gate has
measured the slots prefilling side by side (gptgate/cache_prefill_lanes.py) it takes every
slot from its first call. Where they share the compute (the build here on a CPU: four cold
prefills at once take four prefills' time) warming first gets 86.6 % hits in 0.61–0.73× the
plain client's time, where all four slots at once, as tried, got the plain client's 74.3 %,
at its time; where they prefill at once the warm-up and ramp took 2.25× the plain client's
time on the fake server, now 1.25× (1.00× once measured).
"""

from __future__ import annotations

from typing import Protocol

from .config import Backend
from .providers import PROVIDERS
from .scenarios import RampPolicy

__all__ = [
    "LoneGroup", "lone_admit", "pair_with_warmup", "slot_cached", "slot_ramp", "slot_shares",
    "worth_a_slot",
]

#: per scenario ramp (by identity; the ramp is kept alive here): its slot-cache variant
_ADAPTED: dict[int, tuple[RampPolicy, RampPolicy]] = {}
_KEEP = 64


def slot_cached(backend: Backend) -> bool:
    """Whether ``backend``'s server caches prompts per slot (its provider preset says so)."""
    preset = PROVIDERS.get(backend.provider)
    return preset is not None and preset.slot_cache


def slot_ramp(ramp: RampPolicy) -> RampPolicy:
    """``ramp`` on a slot-cache server: one call per prefix after the warm-up, no turns."""
    kept = _ADAPTED.get(id(ramp))
    if kept is None or kept[0] is not ramp:
        if len(_ADAPTED) >= _KEEP:  # scenarios built per call: start over rather than grow
            _ADAPTED.clear()
        kept = (ramp, ramp.model_copy(update={"start": 1, "turn_wait_s": None}))
        _ADAPTED[id(ramp)] = kept
    return kept[1]


def slot_shares(limit: int, running: int) -> list[int]:
    """The calls in flight each of ``running`` prefixes may have on a slot-cache server of
    ``limit`` slots: the slots it can have to itself, the limit split among them (the first
    ones take the remainder), at least one each. None for a lone prefix: it ramps."""
    if running < 2:
        return []
    base, extra = divmod(max(1, limit), running)
    return [max(1, base + (i < extra)) for i in range(running)]


def worth_a_slot(
    waiting: int, width: int, means: tuple[float, float] | None, *, stalls: bool = False
) -> bool:
    """Whether a prefix running ``width`` calls wide with ``waiting`` calls left gains by one
    more slot, cold for it: only if its calls left take longer at its width than one prefill
    (``means``: the backend's mean call time on a hit and on a miss; None: not measured — yes).
    A job's last prefixes took the slots the others left, each prefilling its prefix again
    for a few calls: three prefixes on four slots 1.22× the plain client's time.

    ``stalls``: the slots share the compute (or that is not measured yet), so the cold
    prefill holds every running call for its time: the slot pays only if what it saves,
    ``waiting × hit × (1/width − 1/(width+1))``, is more than a prefill."""
    if means is None:
        return True
    hit_s, miss_s = means
    left = waiting * hit_s / max(1, width)
    if stalls:
        return left / (max(1, width) + 1) > miss_s
    return left > miss_s


def pair_with_warmup(*, in_flight: int, paired: bool, limit: int) -> bool:
    """Whether a lone prefix, its warm-up in flight, sends a second call with it (cold, on a
    second slot): both slots are warm at the end of the warm-up where the slots prefill at
    once; where they share the compute the second slot's prefill comes at the same cost as
    the ramp's first widening, only sooner."""
    return not paired and in_flight == 1 and limit >= 2


class LoneGroup(Protocol):
    """What ``lone_admit`` reads of a prefix's group at the cache gate (gptgate/cache.py)."""

    warm: bool
    warming: bool
    in_flight: int
    paired: bool
    slots: int
    waiting: int
    misses: int
    fastest_hit: float | None
    warmup_s: float | None

    def can_admit(self) -> bool: ...


def lone_admit(
    group: LoneGroup, *, limit: int, side: bool, means: tuple[float, float] | None
) -> bool | None:
    """Whether a call of a lone prefix's ``group`` may go now on a slot-cache backend of
    ``limit`` slots, where that differs from the ramp's rule (None: the ramp decides).
    ``side``: its slots were measured prefilling side by side — every slot from the first
    call; else a second call goes with the warm-up, and a cold slot is taken once warm only
    when it pays (``worth_a_slot`` against the group's fastest hit and the backend's mean
    miss, ``means``)."""
    if not group.warm:
        if side:
            return group.in_flight < limit
        if not group.warming:
            return None
        return pair_with_warmup(in_flight=group.in_flight, paired=group.paired, limit=limit)
    if group.in_flight < group.slots or not group.can_admit():
        return None
    miss_s = means[1] if means is not None else group.warmup_s
    hit_s = group.fastest_hit
    if hit_s is None:  # none of its calls ended warm yet: wait for one (or, if they came
        return group.misses > 0  # back cold, there is nothing to keep: widen)
    if miss_s is None:
        return True
    return worth_a_slot(group.waiting, max(1, group.in_flight), (hit_s, miss_s), stalls=not side)
