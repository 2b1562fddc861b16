"""Prompt-cache warm-up and the ramp window: cache-aware concurrency per prefix group.

Per (backend, prefix group) a cold prefix is warmed by one call, then a ramp window widens
while the hit rate holds. :class:`RampController` is the pure decision logic, :class:`CacheGate`
the async part (who waits, who goes); :func:`prefix_key` and :func:`cacheable_tokens` define the
groups. The derivation — spills, ceilings, what is learned per backend, turns, shares — is in
docs/caching.md.
"""

from __future__ import annotations

import hashlib
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.lowlevel
from cachetools import TTLCache

from .cache_expiry import ExpiryLearner
from .cache_order import WarmOrder, head_goes_first
from .cache_order_trial import BURST_GAP_S, MAX_GROUPS, QUEUE_FACTOR, OrderTrial
from .cache_pace import pace_interval, pace_slot, should_pace
from .cache_prefill_lanes import PrefillLanes
from .cache_queue_share import QueueShare
from .cache_release import ReleaseJudge
from .cache_shared_home import SharedHomes
from .cache_slots import lone_admit, slot_ramp, slot_shares, worth_a_slot
from .cache_warming import late, warm_share
from .clock import Clock, SystemClock
from .scenarios import RampPolicy
from .tokens import estimate_prompt_tokens

if TYPE_CHECKING:
    from .shared.warmup import FleetWarmup

__all__ = [
    "CACHE_BLOCK_TOKENS",
    "CACHE_MIN_TOKENS",
    "CacheGate",
    "CacheTicket",
    "GroupState",
    "GroupStatistics",
    "PrefixGroup",
    "RampController",
    "cacheable_tokens",
    "prefix_end",
    "prefix_key",
]

#: providers cache from this many prompt tokens (OpenAI: 1,024) …
CACHE_MIN_TOKENS = 1024
#: … in steps of this many (OpenAI: 128)
CACHE_BLOCK_TOKENS = 128
#: time constant of the per-group request-rate estimate (a decayed count ≈ calls per minute)
_RATE_TAU_S = 60.0
_EPS = 1e-9
#: good windows held just under a known ceiling before probing it again, at most
_MAX_PROBE_BACKOFF = 8
#: how long a backend seen spilling a warm prefix to cold replicas counts as spreading
_SPILL_MEMORY_S = 600.0
#: weight of a finished call's latency in its group's decayed mean (the pacing's bound)
_LATENCY_WEIGHT = 0.2
#: widenings a group may owe for good windows held while its backend was full, at most (so a
#: width never jumps more than growth³ beyond the last one a window confirmed)
_MAX_DEFERRED = 3

#: event-loop turns a call that may go with a slot-cache warm-up waits for the others of
#: its burst to reach the gate
_PAIR_CHECKPOINTS = 3

GroupState = Literal["cold", "warming", "ramping", "open"]


# --------------------------------------------------------------------------- prefix groups


@dataclass(frozen=True, slots=True)
class PrefixGroup:
    """The calls that share a cacheable prompt prefix.

    ``key`` is ``"p:<blake2b hex>"`` for a hashed message prefix or ``"k:<cache_key>"`` for an
    explicit key; ``prefix_tokens`` is the estimated size of every message but the last.
    """

    key: str
    prefix_tokens: int


def prefix_key(
    messages: Sequence[Mapping[str, Any]], cache_key: str | None = None
) -> PrefixGroup | None:
    """The prefix group of a call: every message but the last, or ``cache_key`` when given.

    ``None`` when there is no prefix (a single message and no ``cache_key``). The hash is over a
    canonical encoding, so it does not depend on the key order of the message dicts (a server
    renders ``{"role", "content"}`` the same either way). A 200 KB prefix hashes in well under a
    millisecond: no tokenizer, no JSON, one pass of blake2b.
    """
    if cache_key is None and len(messages) <= 1:
        return None
    prefix = messages[:-1] if messages else ()
    tokens = estimate_prompt_tokens(prefix)
    if cache_key is not None:
        if len(cache_key) <= 64:
            return PrefixGroup(key=f"k:{cache_key}", prefix_tokens=tokens)
        digest = hashlib.blake2b(
            cache_key.encode("utf-8", "surrogatepass"), digest_size=16
        ).hexdigest()
        return PrefixGroup(key=f"k#{digest}", prefix_tokens=tokens)
    hasher = hashlib.blake2b(digest_size=16)
    _feed(hasher, prefix)
    return PrefixGroup(key=f"p:{hasher.hexdigest()}", prefix_tokens=tokens)


def prefix_end(messages: Sequence[Mapping[str, Any]], min_tokens: int) -> int | None:
    """The index of the last message of the prefix :func:`prefix_key` groups calls on (every
    message but the last), when that prefix has at least ``min_tokens`` estimated tokens;
    else None. A provider that caches only at explicit markers (Anthropic's
    ``cache_control``) gets its marker there, so the group the gate warms is the prefix the
    provider caches."""
    if len(messages) <= 1 or estimate_prompt_tokens(messages[:-1]) < min_tokens:
        return None
    return len(messages) - 2


def _feed(hasher: Any, value: object) -> None:
    """Feed a canonical, unambiguous (type-tagged, length-prefixed) encoding of ``value``.

    Strings go in as ASCII when they are (a memcpy) and as UTF-16 otherwise (much faster than
    UTF-8 for CJK text); the tag keeps the two apart, and a given string always takes the same
    path, so equal prefixes give equal keys.
    """
    update = hasher.update
    if isinstance(value, str):
        if value.isascii():
            data = value.encode("ascii")
            update(b"a%d:" % len(data))
        else:
            data = value.encode("utf-16-le", "surrogatepass")
            update(b"u%d:" % len(data))
        update(data)
    elif isinstance(value, Mapping):
        update(b"{%d:" % len(value))
        try:
            keys = sorted(value)
        except TypeError:  # mixed key types: fall back to a sort by their text
            keys = sorted(value, key=repr)
        for k in keys:
            _feed(hasher, k if isinstance(k, str) else repr(k))
            _feed(hasher, value[k])
        update(b"}")
    elif isinstance(value, list | tuple):
        update(b"[%d:" % len(value))
        for item in value:
            _feed(hasher, item)
        update(b"]")
    elif value is None or isinstance(value, bool | int | float):
        update(b"v" + repr(value).encode("ascii") + b";")
    elif isinstance(value, bytes):
        update(b"b%d:" % len(value))
        update(value)
    else:
        dump = getattr(value, "model_dump", None)  # pydantic models (e.g. SDK message types)
        _feed(hasher, dump() if callable(dump) else str(value))


def cacheable_tokens(prefix_tokens: int, input_tokens: int | None = None) -> int:
    """The part of a prompt a provider can serve from cache: the prefix, block-aligned.

    ``(prefix_tokens // 128) * 128`` when the prefix has at least 1,024 tokens, else 0
    (OpenAI's rule); clamped to ``input_tokens`` when that is known.
    """
    if prefix_tokens < CACHE_MIN_TOKENS:
        return 0
    aligned = (prefix_tokens // CACHE_BLOCK_TOKENS) * CACHE_BLOCK_TOKENS
    if input_tokens is not None:
        aligned = min(aligned, max(0, input_tokens))
    return aligned


# --------------------------------------------------------------------------- the pure core


class RampController:
    """How many calls of one prefix group may be in flight: the pure ramp-window logic.

    Fed one sample per finished call (cached tokens, cacheable tokens). Samples are pooled into
    tumbling windows of ``policy.window`` samples; the hit rate of a window is
    ``sum(cached) / sum(cacheable)`` (token-weighted). Samples with nothing cacheable carry no
    signal and are ignored. The ramp never goes above ``limit`` nor below ``policy.start`` (or
    ``limit`` if smaller). Per complete window:

    * **good** (hit rate ``>= policy.target_hit_rate``): widen by ``policy.growth`` (at least
      +1) up to ``limit`` — or, when the caller says there is no room to use a wider one
      (``on_sample(..., may_widen=False)``: the backend is already full), hold the width; the
      widenings so earned (at most 3, and never a probe of a known ceiling) are made at the
      first later sample that comes with room, so a group is not left narrow when the backend
      empties;
    * **a spill** — bad, but with at most half of its calls missed (a call *missed* when its
      own hit rate is under the target) and no ceiling known, or with a single call missed:
      hold the width and start a new epoch, so that it is judged again by calls admitted from
      now on only. A lone miss is what a server that spreads a hot prefix over more replicas
      shows: the first call on a replica still cold for the prefix misses, and that replica is
      warm once it has been prefilled; a few misses are a burst that met it before that. So
      the width is not to blame unless the misses go on: a second window in a row with a
      single miss counts as "a few", and "a few" is forgiven once until a good window;
    * **bad**, at a width that had already held: shrink by ``policy.shrink`` — the conditions
      changed (the provider's TTL ran out, the prefix spilled to cold replicas);
    * **bad** right after a widening: that step was too far — go back to the last good width
      and remember the failed one as a *ceiling*.

    With a ceiling known, growth halves the gap to it instead of multiplying (a binary search
    for the widest width that keeps the target), and the ceiling itself is probed only after
    ``backoff`` good windows just below it (1, doubled by every failed probe, at most 8); a
    probe that holds moves the ceiling a quarter further out (and halves the backoff). A bad
    window at a held width also records that width as the ceiling. So on a server that spreads
    a hot prefix over cold replicas the ramp settles just under the width where the hit rate
    breaks, instead of oscillating across it.

    Every change of the effective window starts a new ``epoch``. A caller that tags samples with
    the epoch their call was admitted under (``on_sample(..., epoch=e)``) has stale samples —
    from calls admitted under the previous window — ignored, so one bad burst is not counted
    twice and a widened window is judged only by calls that ran under it.
    """

    __slots__ = (
        "_backoff",
        "_cacheable",
        "_cached",
        "_ceiling",
        "_count",
        "_deferred",
        "_epoch",
        "_grew_from",
        "_held",
        "_limit",
        "_lone",
        "_misses",
        "_probing",
        "_rejudging",
        "_window",
        "forgiving",
        "last_hit_rate",
        "policy",
        "samples",
        "spills",
    )

    def __init__(self, policy: RampPolicy, limit: int, *, start: int | None = None) -> None:
        self.policy = policy
        self._limit = max(1, int(limit))
        self._window = policy.start
        self._epoch = 0
        self._cached = 0
        self._cacheable = 0
        self._count = 0
        #: calls of the current window that lost their hits
        self._misses = 0
        #: the last window was held with a single miss
        self._lone = False
        #: the current window judges again a width whose last window lost several calls' hits
        self._rejudging = False
        self._ceiling: int | None = None
        self._grew_from: int | None = None
        if start is not None and start > policy.start:
            # a width another group confirmed on this backend: a widening this group has not
            # confirmed yet — its first bad window goes back to ``policy.start``
            self._window = int(start)
            self._grew_from = policy.start
        self._probing = False
        self._held = 0
        self._backoff = 1
        #: good windows held for lack of room since the last change: each is one widening owed
        self._deferred = 0
        #: hit rate of the last complete window (None before the first one)
        self.last_hit_rate: float | None = None
        #: samples counted towards a decision so far
        self.samples = 0
        #: bad windows held as spills (re-judged by fresh calls instead of narrowing)
        self.spills = 0
        #: the backend spreads prefixes over replicas: a window with hits among its misses is a
        #: spill, always — narrowing cannot take the prefix back, and only lets copies expire
        self.forgiving = False

    @property
    def window(self) -> int:
        """Calls of the group allowed in flight now: never above ``limit``."""
        return min(self._window, self._limit)

    @property
    def limit(self) -> int:
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        self._limit = max(1, int(value))

    @property
    def epoch(self) -> int:
        return self._epoch

    def forgive(self) -> None:
        """The backend spreads prefixes over replicas: hold through spills and forget the
        ceiling — a width that lost hits there met the router, not its own burst."""
        self.forgiving = True
        self._ceiling = None
        self._probing = False

    def adopt(self, width: int) -> None:
        """A good window ran ``width`` wide, beyond the ramp's own width (the backend's share
        of a running group): that width is confirmed, the ramp holds it from now on — so a
        group left alone does not fall back to a width it has long outgrown. Never past the
        limit nor a known ceiling; the effective window is unchanged (no new epoch)."""
        if self._ceiling is not None:
            width = min(width, self._ceiling - 1)
        width = min(width, self._limit)
        if width > self._window:
            self._window = width
            self._grew_from = None
            self._deferred = 0

    @property
    def ceiling(self) -> int | None:
        """The narrowest width seen failing lately (None: none known)."""
        return self._ceiling

    @property
    def is_open(self) -> bool:
        return self._window >= self._limit

    @property
    def pending_samples(self) -> int:
        """Samples in the current, not yet complete window."""
        return self._count

    def meets_target(self, cached: float, cacheable: float = 1.0) -> bool:
        """Whether ``cached`` of ``cacheable`` input tokens (or a hit rate alone) holds the
        policy's target: a call's, a window's."""
        return cached >= (self.policy.target_hit_rate - _EPS) * cacheable

    def on_sample(
        self, cached: int, cacheable: int, *, epoch: int | None = None, may_widen: bool = True
    ) -> bool:
        """Count one finished call; decide when a window is complete (then return True).
        ``may_widen=False`` turns a good window into a hold (it still confirms the current
        width); the widenings such holds earned (at most three) all happen at the first later
        sample with ``may_widen=True``, unless a bad window came first."""
        if cacheable <= 0:
            return False
        if epoch is not None and epoch != self._epoch:
            return False
        if self._deferred and may_widen:
            current = new = self.window
            for _ in range(self._deferred):
                if self._ceiling is not None and new >= self._ceiling - 1:
                    break  # a known ceiling is probed only on the evidence of a window
                new = self._widen(new)
            self._deferred = 0
            if new != current:
                self._window = new
                self._epoch += 1
                self._cached = self._cacheable = self._count = 0
                return False  # it ran under the narrower window: not a sample of the new one
        cached = min(max(0, cached), cacheable)
        self._cached += cached
        self._cacheable += cacheable
        self._count += 1
        self._misses += not self.meets_target(cached, cacheable)
        self.samples += 1
        if self._count < self.policy.window:
            return False
        rate = self._cached / self._cacheable
        misses = self._misses
        self._cached = self._cacheable = self._count = self._misses = 0
        self.last_hit_rate = rate
        current = self.window
        # a spill: some calls met a replica with a cold cache, the others hit. One call (not
        # twice in a row) is that replica's first — it is warm now; a few at once (once) are
        # a burst that met it before that. Either says nothing against the width: hold it and
        # judge it again by the calls admitted from now on
        mixed = misses > 0 and 2 * misses <= self.policy.window
        lone = mixed and misses == 1 and not self._lone
        if self.meets_target(rate):
            self._lone = self._rejudging = False
            new = self._widen(current, may_widen)
            if not may_widen and current < self._limit:
                self._deferred = min(self._deferred + 1, _MAX_DEFERRED)
        elif (
            lone
            or (mixed and not self._rejudging and self._ceiling is None)
            or (self.forgiving and misses < self.policy.window)
        ):
            self._lone = misses == 1
            self._rejudging = self._rejudging or not lone
            self.spills += 1
            self._epoch += 1
            return True
        else:
            self._lone = self._rejudging = False
            new = self._narrow(current)
            self._deferred = 0
        self._window = new
        if new != current:
            self._epoch += 1
        return True

    def _widen(self, current: int, may_widen: bool = True) -> int:
        self._grew_from = None  # the current width held
        self._probing = False
        if self._ceiling is not None and current >= self._ceiling:
            # the width that failed holds now: look a quarter further, carefully
            self._ceiling = current + max(1, current // 4)
            self._backoff = max(1, self._backoff // 2)
        if current >= self._limit or not may_widen:
            return current
        if self._ceiling is None:
            new = max(current + 1, math.floor(current * self.policy.growth))
        else:
            cap = self._ceiling - 1
            if current < cap:
                new = min(cap, current + max(1, (cap - current + 1) // 2))
            else:
                self._held += 1
                if self._held < self._backoff:
                    return current
                self._held = 0
                self._probing = True
                new = self._ceiling
        new = min(self._limit, new)
        if new > current:
            self._grew_from = current
        return new

    def _narrow(self, current: int) -> int:
        floor_ = min(self.policy.start, self._limit)
        self._held = 0
        if self._grew_from is not None:
            # the last widening went too far: back to the width that held
            if self._probing:
                self._backoff = min(self._backoff * 2, _MAX_PROBE_BACKOFF)
            self._ceiling = None if self.forgiving else current
            new = max(floor_, self._grew_from)
        else:
            self._ceiling = current if current > floor_ and not self.forgiving else None
            new = max(floor_, math.floor(current * self.policy.shrink))
        self._grew_from = None
        self._probing = False
        return new

    def __repr__(self) -> str:
        return (
            f"RampController(window={self.window}, limit={self._limit}, "
            f"epoch={self._epoch}, last_hit_rate={self.last_hit_rate})"
        )


# --------------------------------------------------------------------------- the async gate


@dataclass(frozen=True, slots=True)
class GroupStatistics:
    backend: str
    key: str
    state: GroupState
    #: calls of the group allowed in flight now (1 while cold or warming)
    window: int
    in_flight: int
    waiting: int
    #: lifetime cached / cacheable input of the group, the warm-up included (None: no sample)
    hit_rate: float | None
    samples: int
    prefix_tokens: int = 0
    #: hit rate of the ramp's last complete window
    window_hit_rate: float | None = None
    #: decayed count of calls over the last minute or so
    rate_per_min: float = 0.0
    #: calls waiting for the group's turn on the backend (``RampPolicy.turn_wait_s``)
    turn_waiting: int = 0
    #: calls after the warm-up that lost their hits: the prefix spread to replicas with a
    #: cold cache, or its entry was evicted or expired
    misses: int = 0
    #: ramp windows whose misses were held as a spill instead of narrowing the window
    spills: int = 0
    #: ``shared=``: ``hit_rate`` over every process of the fleet (None: not shared, not read)
    fleet_hit_rate: float | None = None


class _Waiter:
    __slots__ = ("done", "event", "ticket")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.ticket: CacheTicket | None = None
        #: granted or abandoned: no longer counted as waiting
        self.done = False


class _Group:
    __slots__ = (
        "active",
        "backend",
        "cacheable",
        "cacheable_total",
        "cached_total",
        "controller",
        "fastest_hit",
        "fleet_members",
        "in_flight",
        "key",
        "last_admit",
        "latency_s",
        "misses",
        "next_send",
        "paired",
        "peak",
        "prefill_s",
        "prefix_tokens",
        "queued",
        "rate",
        "rate_at",
        "released",
        "samples",
        "share",
        "slots",
        "spent",
        "spills_seen",
        "turn",
        "waiters",
        "waiting",
        "warm",
        "warming",
        "warmup_s",
    )

    def __init__(
        self,
        backend: str,
        group: PrefixGroup,
        policy: RampPolicy,
        limit: int,
        now: float,
        start: int | None = None,
    ) -> None:
        self.backend = backend
        self.key = group.key
        self.prefix_tokens = group.prefix_tokens
        #: nothing measurable to protect (prefix under the provider's cache minimum): warm up,
        #: then no ramp
        self.cacheable = cacheable_tokens(group.prefix_tokens)
        self.controller = RampController(policy, limit, start=start)
        self.warm = not policy.warmup
        self.warming = False
        self.in_flight = 0
        #: the warm-up call still in flight after its prefill (0 or 1): its work for the cache
        #: is done, so it holds no place in the ramp window
        self.spent = 0
        #: the warm-up's time from admission to its prefill (None: not measured yet)
        self.prefill_s: float | None = None
        #: the earliest clock time the group's next paced call may go out, and its calls'
        #: latency, admission to release (a decayed mean; None: none ended yet), which bounds
        #: the spacing (gptgate/cache_pace.py)
        self.next_send = -math.inf
        self.latency_s: float | None = None
        #: when the group's last call was admitted (its calls' spacing: gptgate/cache_expiry.py)
        self.last_admit = -math.inf
        #: the warm-up's time, admission to release: a call's time at a server not queueing
        #: yet (None: not measured; gptgate/cache_order_opening.py)
        self.warmup_s: float | None = None
        #: most calls in flight at once since the ramp's last complete window
        self.peak = 0
        self.waiters: deque[_Waiter] = deque()
        self.waiting = 0
        #: has its turn on the backend (see ``RampPolicy.turn_wait_s``); ``queued`` calls wait
        #: for it on ``turn``
        self.active = False
        self.queued = 0
        self.turn: anyio.Event | None = None
        self.cached_total = 0
        self.cacheable_total = 0
        self.samples = 0
        #: calls after the warm-up that lost their hits (stale ones included): the prefix
        #: spilled to cold replicas, or its cache entry was evicted or expired
        self.misses = 0
        self.rate = 0.0
        self.rate_at = now
        #: the controller's spills already reported to the gate
        self.spills_seen = 0
        #: the backend's fair share per running group and, when crowded, the cap on each
        #: group's width (0: none) — a cell shared by its groups
        self.share: list[int] = []
        #: ``shared=``: processes of the fleet with calls on this prefix (this one included):
        #: a lone group's ramp window is shared among them
        self.fleet_members = 1
        #: the backend's cell: the ramp does not pay there, a warm group uses the whole limit
        #: (gptgate/cache_release.py)
        self.released: list[bool] = [False]
        #: slot caches: most calls of the group in flight at once so far — the slots it has
        #: warm, as far as the gate knows (a call beyond them prefills its prefix cold)
        self.slots = 0
        #: slot caches: a second call went with its warm-up (gptgate/cache_slots.py)
        self.paired = False
        #: slot caches: its fastest call that kept its hits (a warm slot's time per call)
        self.fastest_hit: float | None = None

    @property
    def window(self) -> int:
        if not self.warm:
            return 1
        if self.cacheable == 0 or self.released[0]:
            return self.controller.limit
        ramp = self.controller.window
        if self.fleet_members > 1 and not self.controller.is_open:
            # shared=: the ramp is the fleet's, its window for the prefix's calls from every
            # process that has some (each ramps on its own samples, so they widen together)
            ramp = max(1, -(-ramp // self.fleet_members))
        if self.share:
            share, cap = self.share
            width = min(self.controller.limit, max(ramp, share))
            return min(width, cap) if cap else width
        return ramp

    def state(self) -> GroupState:
        if not self.warm:
            return "warming" if self.warming else "cold"
        if self.cacheable == 0 or self.controller.is_open:
            return "open"
        return "ramping"

    def can_admit(self) -> bool:
        if not self.warm:
            return not self.warming and self.in_flight == 0
        if self.in_flight >= self.controller.limit:
            return False
        # on a server that spreads prefixes, a prefilled warm-up still decoding holds no place
        # in a lone group's ramp: its work for the cache is done, and the ramp's first window
        # would otherwise wait a whole call time for its last sample; among several groups
        # the share counts every call
        sharing = bool(self.share) and self.share[0] > 0
        spent = self.spent if self.controller.forgiving and not sharing else 0
        return self.in_flight - spent < self.window

    def demand(self) -> int:
        """Backend slots this group will use soon: its calls, up to its window (a cold group's
        window after the warm-up: ``start``)."""
        ctl = self.controller
        width = self.window if self.warm else min(ctl.policy.start, ctl.limit)
        return min(width, self.in_flight + self.waiting + self.queued)

    def idle(self) -> bool:
        return not (self.in_flight or self.waiting or self.queued)

    def rate_now(self, now: float) -> float:
        return self.rate * math.exp(-max(0.0, now - self.rate_at) / _RATE_TAU_S)

    def touch(self, now: float) -> None:
        self.rate = self.rate_now(now) + 1.0
        self.rate_at = now


class CacheTicket:
    """One call's passage through the gate. ``release`` always (idempotent); ``prefilled``
    when the first token (stream) or the response (non-stream) arrived; ``observe`` when the
    usage is known. A ticket of a bypassed group does nothing."""

    __slots__ = (
        "_admitted_at", "_cold_miss", "_epoch", "_gap", "_gate", "_group", "_hit",
        "_order_epoch", "_output", "_paced", "_prefilled", "_queued",
        "_released", "fleet_claim", "probe", "warmer",
    )

    def __init__(self, gate: CacheGate | None, group: _Group | None, warmer: bool) -> None:
        self._gate = gate
        self._group = group
        self._released = group is None
        self._prefilled = False
        #: whether the call kept its hits (None: not observed, or the warm-up)
        self._hit: bool | None = None
        #: it waited for the backend's rate budget: its latency measured the budget
        self._paced = False
        #: this call warms the prefix: the others of its group wait for its prefill
        self.warmer = warmer
        #: slot caches: a second cold call sent with the warm-up (not a sample of the ramp)
        self.probe = False
        #: the call's usage showed a miss (None: not observed): it prefilled its prefix
        self._cold_miss: bool | None = None
        #: its answer's length (None: not observed)
        self._output: int | None = None
        #: ``shared=``: the fleet's claim this warmer holds ("" none; gptgate/shared/warmup.py)
        self.fleet_claim = ""
        self._epoch = group.controller.epoch if group is not None else 0
        self._admitted_at = gate._clock.now() if gate is not None else 0.0
        #: time since the group's previous call was admitted (inf: none before it)
        self._gap = math.inf
        if group is not None:
            self._gap = max(0.0, self._admitted_at - group.last_admit)
            group.last_admit = self._admitted_at
        #: admitted while the backend's limit was taken by other calls: it waits at the
        #: limiter, so its time to the first token is not the server's prefill time
        self._queued = gate is not None and group is not None and gate._full(group.backend)
        #: the order trial's phase it was admitted in (None: not a sample of it)
        self._order_epoch = gate._order_epoch(group) if gate and group and not warmer else None

    @property
    def bypassed(self) -> bool:
        return self._group is None

    @property
    def released(self) -> bool:
        return self._released

    def prefilled(self) -> None:
        """The server has processed the prompt: its prefix is now cached."""
        if self._prefilled or self._released or self._group is None:
            return
        self._prefilled = True
        group = self._group
        fleet = self._gate._fleet_warmup if self._gate is not None else None
        if self.warmer and fleet is not None:  # shared=: warm for every process now
            fleet.done(group.backend, group.key, self.fleet_claim, warm=True)
        if self.warmer and not group.warm:
            assert self._gate is not None
            self._gate._became_warm(group)
            group.spent = 1
            measured = self._gate._clock.now() - self._admitted_at
            group.prefill_s = self._gate._prefill(group, measured, queued=self._queued)
            self._gate._wake(group)

    def paced(self) -> None:
        """The call waited for the backend's RPM/TPM budget after it passed the gate: its
        latency is not the server's, so it says nothing on whether the ramp pays."""
        self._paced = True

    def observe(
        self, *, cached_tokens: int, input_tokens: int, output_tokens: int | None = None
    ) -> None:
        """Feed the call's usage: cached input tokens, all input tokens, answer tokens."""
        group = self._group
        if group is None or self._gate is None:
            return
        self._output = output_tokens
        cacheable = cacheable_tokens(group.prefix_tokens, input_tokens)
        if cacheable <= 0:
            return
        cached = min(max(0, cached_tokens), cacheable)
        group.cached_total += cached
        group.cacheable_total += cacheable
        group.samples += 1
        self._gate._count(group.backend, cached, cacheable)
        fleet = self._gate._fleet_warmup
        if fleet is not None:  # shared=: the fleet's hit rate
            fleet.count(group.backend, group.key, cached, cacheable)
        self._cold_miss = not group.controller.meets_target(cached, cacheable)
        if self.warmer or self.probe:
            return  # the warm-up is a miss by construction: not a signal for the ramp
        self._hit = hit = group.controller.meets_target(cached, cacheable)
        group.misses += not hit
        if self._gate._expired(group, self._gap, hit):
            return  # an expired copy: not a sign against the width, nor a spill
        before = group.controller.window
        # widening while the backend is full would only change which group's calls queue at
        # the limiter, and make this prefix burstier (more duplicate misses on cold replicas)
        room = self._gate._busy.get(group.backend, 0) < group.controller.limit
        if group.controller.on_sample(cached, cacheable, epoch=self._epoch, may_widen=room):
            self._gate._confirm_share(group)
            self._gate._learn(group, before)
        if group.controller.window > before:
            self._gate._wake(group)

    def release(self) -> None:
        """The call is over (any outcome). Idempotent. A warmer that never signalled
        ``prefilled`` failed: the next waiter of its group warms instead."""
        if self._released:
            return
        self._released = True
        group = self._group
        assert group is not None and self._gate is not None
        group.in_flight -= 1
        if not self.warmer and not self.probe:
            latency = self._gate._clock.now() - self._admitted_at
            old = group.latency_s
            group.latency_s = latency if old is None else old + _LATENCY_WEIGHT * (latency - old)
            if self._hit is not None and not self._paced:
                self._gate._judge_release(
                    group.backend, self._hit, latency, self._output, group.prefill_s
                )
                if self._gate._spreading(group.backend) and not (
                    group.warmup_s and latency >= QUEUE_FACTOR * group.warmup_s
                ):
                    self._gate._shared_homes.record(
                        group.backend, group.key, latency, self._gate._clock.now()
                    )
            if self._hit is not None and self._order_epoch is not None:
                if group.warmup_s and latency >= QUEUE_FACTOR * group.warmup_s:
                    self._gate._order_trial.queue_seen(group.backend, self._gate._clock.now())
                self._gate._order_trial.record(
                    group.backend, epoch=self._order_epoch, hit=self._hit,
                    now=self._gate._clock.now(), key=group.key, burst=self._gap <= BURST_GAP_S,
                )
        if self.warmer and self._prefilled:
            group.spent = 0
            group.warmup_s = self._gate._clock.now() - self._admitted_at
        self._gate._measure_lanes(self)
        self._gate._busy[group.backend] -= 1
        if self.warmer and not group.warm:
            group.warming = False
        fleet = self._gate._fleet_warmup
        if self.warmer and not self._prefilled and fleet is not None:  # another may warm it
            fleet.done(group.backend, group.key, self.fleet_claim, warm=False)
        self._gate._recheck_warming(group.backend)
        self._gate._wake_head(group.backend)
        self._gate._wake(group)
        if group.released[0] and self._gate._release_bounded.get(group.backend, False):
            self._gate._wake_released(group.backend)
        self._gate._settle(group)


class CacheGate:
    """Warm-up single-flight and the ramp window per (backend, prefix group).

    ``max_groups`` bounds the idle groups remembered (size) and ``idle_ttl_s`` how long an idle
    group is remembered (clock seconds since its last call ended); a forgotten group starts
    cold. Groups with calls in flight or waiting are always kept. The policy of a group is the
    one of the call that created its state. The backend's limit comes with every ``enter`` and
    with :meth:`update_limit` (the backend's limiter calls it whenever its limit moves), so an
    adaptive limit that grows while calls wait here reaches them.
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        max_groups: int = 100_000,
        idle_ttl_s: float = 600.0,
    ) -> None:
        if max_groups < 1:
            raise ValueError("max_groups must be >= 1")
        if idle_ttl_s <= 0:
            raise ValueError("idle_ttl_s must be > 0")
        self._clock = clock or SystemClock()
        self._idle: TTLCache[tuple[str, str], _Group] = TTLCache(
            maxsize=max_groups, ttl=idle_ttl_s, timer=self._clock.now
        )
        self._active: dict[tuple[str, str], _Group] = {}
        self._totals: dict[str, list[int]] = {}
        self._busy: dict[str, int] = {}
        # turns per backend: the groups having one, the groups waiting for one (FIFO), the
        # backend's last known limit
        self._running: dict[str, dict[str, _Group]] = {}
        self._turn_queue: dict[str, deque[_Group]] = {}
        self._limits: dict[str, int] = {}
        # per backend: the widest ramp a group has confirmed lately (new groups start there),
        # until when it counts as spreading prefixes over replicas (its ramps forgive spills),
        # and the share of its limit each running group may use (a cell its groups hold)
        self._learned: dict[str, int] = {}
        self._spreading_until: dict[str, float] = {}
        self._shares: dict[str, list[int]] = {}
        # per backend: until when it counts as crowded (more prefix groups than its limit)
        self._crowded_until: dict[str, float] = {}
        # per backend: the fastest warm-up prefill seen, seconds per prefix token (a warm-up
        # that waited behind a full backend borrows it: gptgate/cache_pace.py)
        self._prefill_per_token: dict[str, float] = {}
        #: ``shared=``: one warm-up per prefix across the fleet (gptgate/shared/warmup.py)
        self._fleet_warmup: FleetWarmup | None = None
        #: per backend: the shortest prefix its provider caches, when above the policy's
        self._min_prefix: dict[str, int] = {}
        #: per backend: its warm groups in the order they became warm (gptgate/cache_order.py)
        self._warm_order: WarmOrder[_Group] = WarmOrder()
        #: per backend: whether its cached copies expire between a group's calls
        #: (gptgate/cache_expiry.py)
        self._expiry = ExpiryLearner()
        #: per backend: whether the ramp pays, from its calls' latencies (gptgate/cache_release.py)
        self._release_judge = ReleaseJudge()
        self._released: dict[str, list[bool]] = {}
        #: per backend: whether its calls showed a server with room for them when it was
        #: released — only then do its released groups wait at the gate for a free place
        #: of its limit (gptgate/cache_queue_share.py)
        self._queue_share = QueueShare()
        self._release_bounded: dict[str, bool] = {}
        #: per backend: whether serving warm groups in order pays, tried and measured
        #: (gptgate/cache_order_trial.py)
        self._order_trial = OrderTrial()
        #: per backend: whether some warm groups' calls are much slower than others', prefixes
        #: sharing a home replica (gptgate/cache_shared_home.py)
        self._shared_homes = SharedHomes()
        #: backends whose servers cache a prompt per slot (``set_slot_cache``)
        self._slot_cached: set[str] = set()
        #: per slot-cache backend: whether its slots prefill side by side, measured
        #: (gptgate/cache_prefill_lanes.py)
        self._lanes = PrefillLanes()

    def set_slot_cache(self, backend: str) -> None:
        """``backend``'s server caches a prompt per slot (llama.cpp; gptgate/cache_slots.py):
        its groups ramp from one call, run side by side on their share of the slots and are
        not paced."""
        self._slot_cached.add(backend)

    def set_min_prefix_tokens(self, backend: str, tokens: int) -> None:
        """``backend``'s provider caches no prefix shorter than ``tokens`` (Anthropic: 4,096
        on Haiku 4.5): its shorter groups bypass the gate, or their warm-up and ramp would
        hold calls back for hits that cannot come."""
        self._min_prefix[backend] = tokens

    def _min_prefix_of(self, backend: str, policy: RampPolicy) -> int:
        """The shortest prefix the gate warms on ``backend``: shorter groups bypass it."""
        return max(policy.min_prefix_tokens, self._min_prefix.get(backend, 0))

    async def enter(
        self, backend: str, group: PrefixGroup | None, policy: RampPolicy, limit: int
    ) -> CacheTicket:
        """Wait until this call may go out for its group, then hand back its ticket.

        Returns at once for a bypassed group (``None``, or a prefix shorter than
        ``policy.min_prefix_tokens``). Waiters are served FIFO per group; cancellation while
        waiting leaves no trace (a slot granted in the same instant is handed back).
        """
        if group is None or group.prefix_tokens < self._min_prefix_of(backend, policy):
            return CacheTicket(None, None, False)
        if backend in self._slot_cached:
            policy = slot_ramp(policy)
        state = self._lookup(backend, group, policy, limit)
        self._limits[backend] = max(1, limit)
        state.released[0] = self._release_judge.released(backend, self._clock.now())
        self._sync_limit(state, limit)  # an idle group kept the limit of its last call
        if not state.active:
            if policy.turn_wait_s is None:
                self._activate(state)
            else:
                await self._await_turn(state, policy.turn_wait_s)
        if state.paired is False and state.warming and backend in self._slot_cached:
            # a call that may go with the warm-up: let the calls that arrive together (a
            # job's first ones) all reach the gate first — with other prefixes, none pairs
            for _ in range(_PAIR_CHECKPOINTS):
                await anyio.lowlevel.checkpoint()
        if state.waiting == 0 and self._may_admit(state):
            ticket = self._admit(state)
            if ticket.warmer and self._fleet_warmup is not None:
                await self._fleet_claim(state, ticket)
            return await self._pace(state, ticket)
        waiter = _Waiter()
        state.waiters.append(waiter)
        state.waiting += 1
        if self._in_order(state):  # it may be the head of its backend now: released
            self._wake(state)
        try:
            await waiter.event.wait()
        except BaseException:
            self._abandon(state, waiter)
            raise
        assert waiter.ticket is not None
        if waiter.ticket.warmer and self._fleet_warmup is not None:
            await self._fleet_claim(state, waiter.ticket)
        return await self._pace(state, waiter.ticket)

    async def _fleet_claim(self, state: _Group, ticket: CacheTicket) -> None:
        """``shared=``: the warmer picked here asks the fleet first. Another process warmed
        the prefix (or warms it now: this waits for it): the call goes as an ordinary one,
        and the group here is warm. Cancelled while asking: the ticket is handed back."""
        assert self._fleet_warmup is not None
        try:
            claim = await self._fleet_warmup.claim(state.backend, state.key)
        except BaseException:
            ticket.release()
            raise
        if claim is not None:
            ticket.fleet_claim = claim
            return
        ticket.warmer = False
        if not state.warm:
            self._became_warm(state)
            self._wake(state)

    async def _pace(self, state: _Group, ticket: CacheTicket) -> CacheTicket:
        """On a backend that spreads prefixes, space a group's calls beyond its first
        ``start`` in flight: ``start`` per prefill time, never slower than its window's own
        pace (gptgate/cache_pace.py). The pause holds the call's ticket: cancelled meanwhile,
        the slot is handed back."""
        start = state.controller.policy.start
        if not should_pace(
            warmer=ticket.warmer,
            prefill_s=state.prefill_s,
            in_flight=state.in_flight,
            start=start,
            spreading=self._spreading(state.backend) and not state.released[0]
            and not self._order_trial.ordered(state.backend, self._clock.now())
            and state.backend not in self._slot_cached,
        ):
            return ticket
        assert state.prefill_s is not None
        interval = pace_interval(state.prefill_s, start, state.latency_s, state.window)
        now = self._clock.now()
        at, state.next_send = pace_slot(now, state.next_send, interval)
        if at > now:
            try:
                await self._clock.sleep(at - now)
            except BaseException:
                ticket.release()
                raise
        return ticket

    def _full(self, backend: str) -> bool:
        """Whether the calls admitted here before the last one take the backend's limit: the
        last one waits at the limiter."""
        return self._busy.get(backend, 0) - 1 >= self._limits.get(backend, math.inf)

    def _prefill(self, state: _Group, measured: float, *, queued: bool) -> float | None:
        """The prefill time the pacing spaces ``state``'s calls by: the backend's fastest
        warm-up per prefix token, scaled to this prefix — its own warm-up's time (admission
        to first token) counts unless it waited behind a full backend. A warm-up that waited
        at the limiter, or stalled before the server scheduled it (a straggler), measured
        the wait, not the prefill: family draw 23, whose last prefix's warm-up stalled 4.5 s
        (the others took 0.16–0.19 s), spaced its calls up to 9 s apart and took 2.3× the hand
        warm-up's time. None: nothing measured yet — no spacing (a full backend's limiter lets
        calls out one by one anyway)."""
        tokens = max(1, state.prefix_tokens)
        best = self._prefill_per_token.get(state.backend)
        if not queued and measured > 0:
            best = min(best, measured / tokens) if best is not None else measured / tokens
            self._prefill_per_token[state.backend] = best
        if best is None:
            return None if queued else measured
        return best * tokens

    def update_limit(self, backend: str, limit: int) -> None:
        """``backend``'s concurrency limit moved (``concurrency="auto"``).

        Ramp windows are capped by the limit and turns are given against it, so a new limit
        must reach the calls already waiting here: a job whose calls all entered the gate at
        slow start's first limit would otherwise run at that limit to its end. O(1) when the
        limit has not changed; else O(groups with calls here)."""
        limit = max(1, limit)
        if self._limits.get(backend) == limit:
            return
        self._limits[backend] = limit
        self._reshare(backend)
        for state in [g for g in self._active.values() if g.backend == backend]:
            self._sync_limit(state, limit)
        self._next_turns(backend)

    def _sync_limit(self, state: _Group, limit: int) -> None:
        """Cap ``state``'s ramp by the backend's limit; a wider window admits its waiters."""
        limit = max(1, limit)
        if state.controller.limit != limit:
            state.controller.limit = limit
            self._wake(state)

    def mark_warm(
        self, backend: str, group: PrefixGroup | None, policy: RampPolicy, limit: int
    ) -> None:
        """The prefix was prefilled on ``backend`` by a call that did not pass the gate (a
        light pre-warm such as ``gate.warm``, a keep-warm refresh): its group skips the
        single-flight warm-up and starts ramping; a warm-up in flight stops holding the others.
        A bypassed group (``None``, or shorter than ``policy.min_prefix_tokens``) is ignored."""
        if group is None or group.prefix_tokens < self._min_prefix_of(backend, policy):
            return
        state = self._lookup(backend, group, policy, limit)
        state.touch(self._clock.now())
        if self._fleet_warmup is not None:  # shared=: warm for every process
            self._fleet_warmup.done(backend, group.key, "", warm=True)
        if not state.warm:
            self._became_warm(state)
            self._wake(state)
        self._settle(state)

    def waiting(self, backend: str) -> int:
        """Calls to ``backend`` held by the gate: behind a warm-up, at a ramp window, or
        waiting for their group's turn."""
        return sum(g.waiting + g.queued for g in self._active.values() if g.backend == backend)

    def in_flight(self, backend: str) -> int:
        """Calls to ``backend`` admitted by the gate and not yet released."""
        return self._busy.get(backend, 0)

    def statistics(self, backend: str | None = None) -> list[GroupStatistics]:
        now = self._clock.now()
        return [
            GroupStatistics(
                backend=g.backend,
                key=g.key,
                state=g.state(),
                window=g.window,
                in_flight=g.in_flight,
                waiting=g.waiting,
                hit_rate=(g.cached_total / g.cacheable_total) if g.cacheable_total else None,
                samples=g.samples,
                prefix_tokens=g.prefix_tokens,
                window_hit_rate=g.controller.last_hit_rate,
                rate_per_min=g.rate_now(now),
                turn_waiting=g.queued,
                misses=g.misses,
                spills=g.controller.spills,
                fleet_hit_rate=self.fleet_hit_rate(g.backend, g.key),
            )
            for g in self._groups(backend)
        ]

    def hit_rate(self, backend: str) -> float | None:
        """Cached over cacheable input of every observed call to ``backend`` (None: none yet).
        Not affected by group eviction."""
        totals = self._totals.get(backend)
        if not totals or totals[1] == 0:
            return None
        return totals[0] / totals[1]

    def fleet_hit_rate(self, backend: str, key: str | None = None) -> float | None:
        """``shared=``: :meth:`hit_rate` over every process of the fleet (of one prefix group
        with ``key``), as last read from Redis; None without ``shared=`` or before a read."""
        fleet = self._fleet_warmup
        return None if fleet is None else fleet.hit_rate(backend, key)

    def live_groups(self) -> list[tuple[str, str]]:
        """``(backend, key)`` of every group with calls here (in flight or waiting)."""
        return list(self._active)

    def set_fleet_members(self, backend: str, key: str, members: int) -> None:
        """``shared=``: ``members`` processes have calls on this group now: its ramp window
        is shared among them (a lone group's; one that widens admits its waiters)."""
        state = self._active.get((backend, key))
        if state is not None and state.fleet_members != max(1, members):
            state.fleet_members = max(1, members)
            self._wake(state)

    def hot_groups(self, backend: str, min_rate_per_min: float) -> list[str]:
        """Keys of the groups of ``backend`` called at least ``min_rate_per_min`` times a
        minute lately (a decayed count, one-minute time constant), hottest first — the ones
        worth refreshing before the provider's cache TTL runs out."""
        now = self._clock.now()
        hot = [(g.rate_now(now), g.key) for g in self._groups(backend)]
        return [key for rate, key in sorted(hot, reverse=True) if rate >= min_rate_per_min]

    # ------------------------------------------------------------------ internals

    def _groups(self, backend: str | None) -> list[_Group]:
        self._idle.expire()
        groups = list(self._active.values()) + list(self._idle.values())
        if backend is not None:
            groups = [g for g in groups if g.backend == backend]
        return groups

    # ---- turns: few prefix groups live at a time per backend

    def _has_room(self, backend: str) -> bool:
        """Whether the groups having a turn leave part of the backend's limit unused."""
        running = self._running.get(backend)
        if not running:
            return True
        limit = self._limits.get(backend, 1)
        return sum(g.demand() for g in running.values()) < limit

    def _reshare(self, backend: str) -> None:
        """Recompute the backend's share per running group: while two or more groups run,
        each may have its share of the limit in flight whatever its ramp window, so that the
        ramp never leaves the backend idle while calls wait (the hand warm-up's speed). A lone
        group ramps alone: its width is what keeps a cold burst on few replicas."""
        cell = self._shares.setdefault(backend, [0, 0])
        groups = self._running.get(backend, {})
        running = len(groups)
        limit = self._limits.get(backend, 1)
        fair = 0 if running < 2 else max(1, limit // running)
        # a straggling warm-up holds one place, not its share (gptgate/cache_warming.py)
        share = fair and warm_share(limit, running, self._late_warmups(backend, groups))
        if running and backend in self._slot_cached:
            self._slot_reshare(groups, limit)
            return
        crowded = self._crowded(backend, groups)
        grew = share > cell[0] or (cell[1] and not crowded)
        cell[0] = share
        cell[1] = fair if crowded else 0
        if grew:
            for g in list(self._active.values()):
                if g.backend == backend:
                    self._wake(g)

    def _slot_reshare(self, groups: Mapping[str, _Group], limit: int) -> None:
        """Slot caches: while several groups run, each has its own slots, the limit split
        among them (gptgate/cache_slots.py); a group whose share grew is woken."""
        widths = slot_shares(limit, len(groups))
        means = self._release_judge.means(next(iter(groups.values())).backend)
        side = self._lanes.side_by_side(next(iter(groups.values())).backend)
        for g, width in zip(groups.values(), widths or [0] * len(groups), strict=True):
            if not width:  # a lone prefix ramps from its warm slot, or takes every slot
                g.share = []  # where they prefill side by side (``_slot_admit``)
                if side:
                    g.controller.adopt(limit)
                    self._wake(g)
                continue
            old = g.share[0] if g.share else 0
            if old and width > old and not worth_a_slot(g.waiting + g.queued, old, means):
                width = old
            grew = width > old
            g.share = [width, width]
            if grew:
                self._wake(g)

    def _late_warmups(self, backend: str, groups: Mapping[str, _Group]) -> int:
        """Running groups of ``backend`` whose warm-up is late (gptgate/cache_warming.py):
        out longer than the backend's measured prefill for their prefix allows."""
        best = self._prefill_per_token.get(backend)
        if best is None:
            return 0
        now = self._clock.now()
        return sum(
            1 for g in groups.values()
            if g.warming and late(now - g.last_admit, best * max(1, g.prefix_tokens))
        )

    def _recheck_warming(self, backend: str) -> None:
        """A call of ``backend`` ended: while a group there is warming, its warm-up may have
        become late since the shares were computed."""
        if any(g.warming for g in self._running.get(backend, {}).values()):
            self._reshare(backend)

    def _activate(self, state: _Group) -> None:
        if state.active:
            return
        state.active = True
        self._running.setdefault(state.backend, {})[state.key] = state
        if state.warm:  # back after an idle spell: behind the groups already warm
            self._warm_order.enqueue(state.backend, state.key, state)
        state.share = self._shares.setdefault(state.backend, [0, 0])
        self._reshare(state.backend)
        if state.turn is not None:
            state.turn.set()
            state.turn = None

    async def _await_turn(self, state: _Group, wait_s: float) -> None:
        """Wait (at most ``wait_s``) until the group gets its turn; then it has one."""
        if state.turn is None:
            state.turn = anyio.Event()
            self._turn_queue.setdefault(state.backend, deque()).append(state)
        turn = state.turn
        state.queued += 1
        try:
            # a group's demand is the calls it has here: let the calls that arrive together (a
            # flushed batch) all be counted before turns are given
            await anyio.lowlevel.checkpoint()
            self._next_turns(state.backend)
            if not state.active:
                with anyio.move_on_after(self._clock.to_real(wait_s)):
                    await turn.wait()
        except BaseException:
            state.queued -= 1
            self._settle(state)
            raise
        state.queued -= 1
        if not state.active:
            self._activate(state)  # waited long enough: no group starves behind busy ones

    def _next_turns(self, backend: str) -> None:
        """Give turns to waiting groups while the running ones leave room."""
        queue = self._turn_queue.get(backend)
        while queue and self._has_room(backend):
            state = queue.popleft()
            if state.active:
                continue
            if state.queued:
                self._activate(state)
            else:
                state.turn = None  # every call that waited for it was cancelled

    def _end_turn(self, state: _Group) -> None:
        if not state.active:
            return
        state.active = False
        self._warm_order.remove(state.backend, state.key)
        self._shared_homes.forget(state.backend, state.key)
        running = self._running.get(state.backend)
        if running is not None and running.get(state.key) is state:
            del running[state.key]
        self._reshare(state.backend)

    def _confirm_share(self, state: _Group) -> None:
        """A ramp window of ``state`` completed: if it was good while the group ran on its
        share of the backend, wider than its ramp, the ramp takes the width it used (its peak
        in flight, within the share) as its own."""
        ctl = state.controller
        rate = ctl.last_hit_rate
        if state.share and rate is not None and ctl.meets_target(rate):
            ctl.adopt(min(state.window, state.peak))

    def _learn(self, state: _Group, width: int) -> None:
        """A ramp window of ``state`` completed at ``width``: what it says about the backend.

        A good window, on a group that never lost its hits by widening (no ceiling) nor at all
        after its warm-up, shows that a warm prefix runs this wide on this server without
        spilling to cold replicas — as far as the group used the width (its peak in flight).
        New groups on the backend then start their ramp there instead of at ``policy.start``
        (after their warm-up, and back to ``start`` at their first bad window). Any sign of
        spilling — a bad window, a ceiling, a call that lost its hits (a spill the ramp held
        through, or one among calls admitted under an earlier window) — forgets it: on a server
        that spreads hot prefixes, each new prefix is cold on the replicas it spreads to, and
        must ramp from ``start``.
        """
        ctl = state.controller
        rate = ctl.last_hit_rate
        backend = state.backend
        good = rate is not None and ctl.meets_target(rate)
        learned = max(self._learned.get(backend, 0), min(width, state.peak))
        if good and ctl.ceiling is None and not state.misses and learned > ctl.policy.start:
            self._learned[backend] = learned
        else:
            self._learned.pop(backend, None)
        if ctl.spills > state.spills_seen:
            state.spills_seen = ctl.spills
            self._mark_spreading(backend)
        state.peak = state.in_flight

    def _mark_spreading(self, backend: str) -> None:
        """``backend`` spread a warm prefix to replicas with a cold cache (a spill)."""
        self._spreading_until[backend] = self._clock.now() + _SPILL_MEMORY_S
        for g in self._active.values():
            if g.backend == backend:
                g.controller.forgive()
        self._reshare(backend)

    def _spreading(self, backend: str) -> bool:
        return self._spreading_until.get(backend, -math.inf) > self._clock.now()

    def _crowded(self, backend: str, running: Mapping[str, _Group]) -> bool:
        """Whether each running group is held to its fair share (a cap, not only a floor).

        A spreading server sends a prefix's calls to colder replicas once the prefix is hot
        (OpenAI: above ~15 requests a minute) and once its replica's slots are full. A job of
        more prefixes than the limit has calls in flight (50 shuffled prompts at limit 50)
        then hits more if every prefix keeps a few calls in flight than if a few prefixes run
        their ramp's full width: 83.4% → 87.9% of the ceiling on the simulator's overflow
        server, at the naive client's speed. Jobs of few prefixes keep their ramps (a short
        cache lifetime punishes spreading a prefix's calls over time). The verdict holds while
        the backend counts as spreading, so that a job's tail does not flip it.
        """
        if not self._spreading(backend) or not running:
            return False
        limit = self._limits.get(backend, 1)
        if self._crowded_until.get(backend, -math.inf) <= self._clock.now():
            groups = [g for g in self._active.values() if g.backend == backend]
            pending = sum(g.in_flight + g.waiting + g.queued for g in groups)
            # many small prefixes: each has fewer calls than half the limit, so a ramp would
            # not reach its width before the prefix is done; a few large ones keep their ramps
            # (one prompt-ordered job of 10 prefixes at limit 10: the cap cost it 1.12× time
            # and, on a 5 s cache lifetime, 16 points of hits)
            if len(groups) < limit or 2 * pending > limit * len(groups):
                return False
            self._crowded_until[backend] = self._spreading_until[backend]
        start = min(g.controller.policy.start for g in running.values())
        # few running groups: a turn's hand-over, not a crowd
        return len(running) >= max(3, limit // start + 1)

    def _lookup(self, backend: str, group: PrefixGroup, policy: RampPolicy, limit: int) -> _Group:
        k = (backend, group.key)
        state = self._active.get(k)
        if state is None:
            state = self._idle.pop(k, None)
            if state is None:
                state = _Group(
                    backend, group, policy, limit, self._clock.now(), self._learned.get(backend)
                )
                if self._spreading(backend):
                    state.controller.forgive()

            self._active[k] = state
            state.released = self._released.setdefault(backend, [False])
        return state

    def _judge_release(
        self, backend: str, hit: bool, latency_s: float, output_tokens: int | None = None,
        prefill_s: float | None = None,
    ) -> None:
        """A finished call's latency: once the hits take longer than the misses, the ramp does
        not pay on ``backend`` and its warm groups go out at the whole limit — bounded at the
        gate by the limit where the calls showed a server with room for them."""
        now = self._clock.now()
        if output_tokens is not None and not self._release_judge.released(backend, now):
            self._queue_share.record(backend, output_tokens, latency_s)
        if self._release_judge.record(
            backend, hit=hit, latency_s=latency_s, now=now, prefill_s=prefill_s,
            room=self._queue_share.room(backend),
        ):
            self._release_bounded[backend] = self._queue_share.room(backend)
            self._queue_share.reset(backend)
            self._released.setdefault(backend, [False])[0] = True
            for g in list(self._active.values()):
                if g.backend == backend:
                    self._wake(g)

    def _admit(self, state: _Group) -> CacheTicket:
        # the group's rate counts the calls it sends, not those that waited here and went to
        # another backend's gate (late binding)
        state.touch(self._clock.now())
        # slot caches: a call sent while the warm-up is out goes with it (gptgate/cache_slots.py)
        probe = state.backend in self._slot_cached and not state.warm and state.warming
        warmer = not state.warm and not probe
        if warmer:
            state.warming = True
        state.in_flight += 1
        state.peak = max(state.peak, state.in_flight)
        self._busy[state.backend] = self._busy.get(state.backend, 0) + 1
        ticket = CacheTicket(self, state, warmer)
        if state.backend in self._slot_cached:
            ticket.probe = probe
            state.paired = state.paired or probe
            state.slots = max(state.slots, state.in_flight)
        return ticket

    def _slot_admit(self, state: _Group) -> bool | None:
        """Slot caches (gptgate/cache_slots.py): whether a call of ``state`` may go now,
        where that differs from the ramp's rule (None: the ramp decides)."""
        backend = state.backend
        if len(self._running.get(backend, {})) > 1 or state.share:
            return None  # several prefixes: their shares of the slots (``_reshare``)
        return lone_admit(state, limit=state.controller.limit,
                          side=self._lanes.side_by_side(backend),
                          means=self._release_judge.means(backend))

    def _measure_lanes(self, ticket: CacheTicket) -> None:
        """A call of a slot-cache backend ended: a measurement of whether its slots prefill
        side by side (gptgate/cache_prefill_lanes.py); a new verdict reshapes its groups."""
        group = ticket._group
        assert group is not None
        backend = group.backend
        if backend not in self._slot_cached:
            return
        before = self._lanes.side_by_side(backend)
        now = self._clock.now()
        if ticket._cold_miss:
            self._lanes.miss_released(backend, ticket._admitted_at, now)
        elif ticket._cold_miss is not None and not ticket._paced:
            self._lanes.hit_released(backend, ticket._admitted_at, now)
            latency = now - ticket._admitted_at
            fastest = group.fastest_hit
            group.fastest_hit = latency if fastest is None else min(fastest, latency)
        if self._lanes.side_by_side(backend) != before:
            self._reshare(backend)

    def _expired(self, state: _Group, gap_s: float, hit: bool) -> bool:
        """Whether a warm call of ``state`` missed for an expired copy (gptgate/cache_expiry.py);
        learned only where the backend is not seen spreading (there the ramp's forgiving
        spills and shares handle misses as before)."""
        if self._spreading(state.backend):
            return False
        return self._expiry.expired(state.backend, gap_s, hit, self._clock.now())

    def _became_warm(self, state: _Group) -> None:
        state.warm = True
        state.warming = False
        if state.paired:  # slot caches: its probe warms a second slot
            state.controller.adopt(2)
        if state.active:
            self._warm_order.enqueue(state.backend, state.key, state)
            self._reshare(state.backend)  # a late warm-up's share is its own again

    def _in_order(self, state: _Group) -> bool:
        """Whether ``state``'s backend serves its warm groups first come, first served: a job
        (turns) with two or more warm groups (gptgate/cache_order.py), on a backend not seen
        spreading whose cached copies were seen expiring between a group's calls
        (gptgate/cache_expiry.py) or where a warm prefix was seen running wider than ``start``
        without losing a hit (the width new groups start at: a server keeping a prefix on its
        home replica), or where the order is tried or was measured to pay
        (gptgate/cache_order_trial.py), or in a job's opening where its calls queue at the
        server (gptgate/cache_order_opening.py), or where some warm groups' calls take twice
        as long as others' on a backend seen spreading: prefixes sharing a home replica
        (gptgate/cache_shared_home.py)."""
        backend = state.backend
        now = self._clock.now()
        if not (
            state.warm
            and state.controller.policy.turn_wait_s is not None
            and self._warm_order.count(backend) >= 2
        ):
            return False
        learned = not self._spreading(backend) and (
            self._expiry.short_lived(backend, now) or backend in self._learned
        )
        few = self._warm_order.count(backend) <= MAX_GROUPS
        shared = self._shared_homes.seen(backend, now)
        return learned or (few and (shared or self._order_trial.ordered(backend, now)))

    def _order_epoch(self, state: _Group) -> int | None:
        """The order trial's phase a warm call of ``state`` admitted now is a sample of: only
        a job's, while two to ``MAX_GROUPS`` groups are warm, and not one the expiry learner
        orders."""
        backend = state.backend
        now = self._clock.now()
        warm = self._warm_order.count(backend)
        if state.controller.policy.turn_wait_s is None or not 2 <= warm <= MAX_GROUPS:
            return None
        trial = self._order_trial
        if trial.phase(backend, now) == "side" and self._in_order(state):
            return None
        return trial.epoch(backend, now)

    def _may_admit(self, state: _Group) -> bool:
        """``state.can_admit()`` — but on a backend serving warm groups in order, the head
        is released (its calls up to the limit: "warm one, then release"), and once the
        backend's limit is taken the others wait for the slots it leaves; a slot-cache
        backend's lone group has its own rule (``_slot_admit``)."""
        if state.backend in self._slot_cached:
            slot = self._slot_admit(state)
            if slot is not None:
                return slot
        if not self._in_order(state):
            if (
                state.warm and state.released[0]
                and self._release_bounded.get(state.backend, False)
                and self._limit_taken(state.backend)
            ):
                return False  # released groups wait here, not at the limiter (round 16)
            return state.can_admit()
        backend = state.backend
        limit = self._limits.get(backend, 1)
        head = self._warm_order.head(backend, state)
        if head is None or not head_goes_first(
            head.in_flight + head.waiting, limit, self._warm_order.count(backend)
        ):
            return state.can_admit()
        if head is state:
            return state.in_flight < state.controller.limit
        return self._busy.get(backend, 0) < limit and state.can_admit()

    def _limit_taken(self, backend: str) -> bool:
        """Whether ``backend``'s limit is taken by calls the gate let through. A released
        backend's warm groups each have the whole limit as their window; without this bound
        they passed the gate together, queued at the limiter in an order the gate no longer
        chooses, and their latency from admission counted that queue (docs/caching.md, round
        15)."""
        return self._busy.get(backend, 0) >= self._limits.get(backend, 1)

    def _wake_released(self, backend: str) -> None:
        """A slot of a released ``backend`` freed: a warm group held only by the bound above
        takes it (the finished call's own group was woken first)."""
        for g in list(self._active.values()):
            if g.backend == backend and g.waiters and not self._limit_taken(backend):
                self._wake(g)

    def _wake_head(self, backend: str) -> None:
        """A slot of ``backend`` freed: the head of its warm order takes it first."""
        head = self._warm_order.head(backend)
        if head is not None:
            self._wake(head)

    def _wake(self, state: _Group) -> None:
        waiters = state.waiters
        while waiters and self._may_admit(state):
            waiter = waiters.popleft()
            if waiter.done:
                continue
            waiter.done = True
            state.waiting -= 1
            waiter.ticket = self._admit(state)
            waiter.event.set()
        if state.waiting == 0:
            waiters.clear()

    def _abandon(self, state: _Group, waiter: _Waiter) -> None:
        if waiter.ticket is not None:
            # granted in the same instant we were cancelled: hand the slot (or the warm-up) on
            waiter.ticket.release()
            return
        if not waiter.done:
            waiter.done = True
            state.waiting -= 1
            if state.waiting == 0:
                state.waiters.clear()
        self._settle(state)

    def _settle(self, state: _Group) -> None:
        """An idle group ends its turn and moves to the bounded TTL cache (its idle clock
        starts now); waiting groups get the room that frees."""
        if state.idle():
            self._end_turn(state)
            k = (state.backend, state.key)
            if self._active.get(k) is state:
                del self._active[k]
                self._idle[k] = state
        self._next_turns(state.backend)

    def _count(self, backend: str, cached: int, cacheable: int) -> None:
        totals = self._totals.setdefault(backend, [0, 0])
        totals[0] += cached
        totals[1] += cacheable

    def __repr__(self) -> str:
        return f"CacheGate(active={len(self._active)}, idle={len(self._idle)})"
