"""Warm order: a backend's warm prefix groups served first come, first served (issue 31).

The simplest warm-up by hand — each prefix's first call alone, the rest released together
when it returns, all under one FIFO semaphore — runs the prefixes one after another, in the
order their warm-ups returned: the semaphore's queue holds the first prefix's calls, then the
second's. The cache gate gave every running group its share of the backend instead, so the
prefixes ran side by side for the whole job. Where a cached entry lives a fixed time — not
refreshed by a hit (the family's draws 14, 18, 59, 76) or kept while idle but queued behind
the other prefixes' calls on a server of few slots (draw 65: one slot, each prefix's calls
queued in blocks of its share, an hour between blocks) — a prefix that spans the whole job
meets four times as many expiries as one that spans a quarter of it, and each costs a miss
(draw 76: 60 misses per prefix against the hand's 33; draw 65: 35 misses against 11).

So on a backend where copies were seen expiring between a group's calls (a cache lifetime
learned per backend: gptgate/cache_expiry.py) and not seen spreading a prefix, for jobs
(``RampPolicy.turn_wait_s`` set), while two or more groups are warm: the group that became
warm first among those with calls to send — the *head* — is released, its calls up to the
backend's limit ("warm one, then release"), and once the backend's limit is taken the other
warm groups' calls wait at the gate until the head has no more than the limit left. A head
that cannot fill the backend alone is not released (its burst would only spread on a router
that spreads by rate: many small prefixes on the named ``spread`` server lost 76.8% -> 58.0%
hits when each went first). Groups still cold warm up as before; a lone group keeps its ramp;
a backend seen spreading keeps its shares and pacing (gptgate/cache.py).

Where the expiries hide from the spacing the learner measures — behind a server queue every
call is admitted 0 s after the previous one, and on a router spreading by calls in flight a
prefix's copies on the replicas it spills to age between rare visits — the order is tried
and kept only where it was measured to keep more hits (gptgate/cache_order_trial.py).

Applied on every backend not seen spreading (the last session's version, gated on a good ramp
window), it cost the named profiles 9–19 points of hits where cached copies live minutes: a
released prefix's calls filled the KV blocks the other prefixes' copies lived in. Learned
lifetimes leave those servers as they were: nothing expires there between a group's calls.

It also applies where a warm prefix was seen running wider than ``start`` without losing a
hit (the width the backend teaches new groups, forgotten at any sign of spilling): on a
prefix-affine server two prefixes often share a home replica, and the shares held that home
at two shares' batch while other replicas idled; in order, the head fills its home and the
rest overflows to idle replicas, as the hand's calls do (family draw 11: 1.10× → 0.98× the
hand warm-up's time, three engine seeds; docs/caching.md, "Time misses at a higher hit rate").
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from .cache_order_trial import MAX_GROUPS

__all__ = ["WarmOrder", "head_goes_first"]


def head_goes_first(head_calls: int, limit: int, warm_groups: int) -> bool:
    """Whether a head with ``head_calls`` calls in flight or waiting goes first on a backend
    serving its ``warm_groups`` warm groups in order at ``limit``.

    A head that can fill the backend alone always does. One that cannot goes first too while
    few groups are warm (at most :data:`~gptgate.cache_order_trial.MAX_GROUPS`, a job of a few
    large prefixes): the hand's FIFO semaphore gives the rest of the limit to the next
    prefix's calls as the head runs out, where shares would run the last calls of every
    prefix side by side again. Family draw 1021 (2 replicas × 26 slots, copies kept 5.2 s
    idle, 400 calls over 4 prefixes at 64): in order from 86 s (a trial, then kept), each
    head with fewer than 64 calls to go fell back to its share, so the prefixes' last calls
    ran side by side and met expired copies — 60.8% hits against the plain client's 74.2%;
    with the head going first to its last call, 70.0%. Among many warm groups it does not: a
    small head released at once spreads on a router that spreads by rate (many prefixes on
    the named ``spread`` server: 76.8% -> 58.0% hits when each head went first)."""
    return head_calls >= limit or warm_groups <= MAX_GROUPS


class _Waits(Protocol):
    @property
    def waiting(self) -> int: ...


G = TypeVar("G", bound=_Waits)


class WarmOrder(Generic[G]):
    """Per backend, its warm groups with calls at the gate, in the order they became warm."""

    __slots__ = ("_order",)

    def __init__(self) -> None:
        self._order: dict[str, dict[str, G]] = {}

    def enqueue(self, backend: str, key: str, group: G) -> None:
        """``group`` is warm (or came back warm): behind the backend's warm groups, unless
        already queued."""
        self._order.setdefault(backend, {}).setdefault(key, group)

    def remove(self, backend: str, key: str) -> None:
        """``group`` has no calls here any more: it leaves the order."""
        order = self._order.get(backend)
        if order is not None:
            order.pop(key, None)
            if not order:
                del self._order[backend]

    def count(self, backend: str) -> int:
        """Warm groups of ``backend`` with calls here."""
        return len(self._order.get(backend, ()))

    def head(self, backend: str, asking: G | None = None) -> G | None:
        """The first warm group of ``backend`` with calls waiting at the gate, or ``asking``
        (a group with a call arriving) if that comes first; None: none."""
        for group in self._order.get(backend, {}).values():
            if group.waiting or group is asking:
                return group
        return None
