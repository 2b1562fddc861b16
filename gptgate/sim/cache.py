"""Prefix caching and prefix-affine routing, by OpenAI's published rules.

* The prompt's token stream is the messages serialized canonically: per message a 16-char
  header (the 4 tokens of chat-format overhead) and its text padded to whole tokens, so that
  character ``4·i`` is token ``i`` of an ASCII prompt (gptgate/sim/tokenizer.py). A cache
  block of 128 tokens is then 512 characters, keyed by a chained hash of everything before it.
* Nothing is cached below ``cache_min_tokens`` (1024); the cached part of a request is the
  longest cached block-aligned prefix; a prefix is inserted only once a request carrying it
  has been prefilled (so a simultaneous burst all misses); entries expire after
  ``cache_ttl_s`` idle (each hit refreshes them) and the LRU bound evicts the oldest. With
  ``cache_refresh_on_hit=False`` a hit refreshes nothing: an entry expires ``cache_ttl_s``
  after it was written, and the bound evicts the oldest written (first in, first out).
* Requests are routed to a replica by a hash of the first ~256 tokens plus
  ``prompt_cache_key``; above ``prefix_overflow_rpm`` requests/minute for one such key,
  traffic spreads over more replicas, each with its own cold cache.

KV-cache pressure (profile ``kv_blocks``; :class:`KVPrefixCache`, vLLM's automatic prefix
caching): a replica has ``kv_blocks`` KV blocks of ``cache_block_tokens`` tokens. A running
sequence holds ``ceil((prompt + output) / block)`` of them from admission to its end (its final
footprint, reserved up front: analytic, no per-token growth). The full blocks of its prompt
become cache entries once prefilled, shared by reference count: a block used by several running
sequences counts once. The prefix cache is whatever the running sequences leave free: blocks
no sequence uses stay cached in LRU order (a chain's tail before its head) until running
sequences need the room, the idle TTL passes or ``cache_max_blocks`` is reached. So the more
sequences run, the fewer idle prefixes survive between their uses. Running sequences are not
preempted when they alone exceed the budget (the cache is then simply empty). Without refresh
on hit, a block's lifetime runs from when it was computed: one older than the TTL is a miss
for a new sequence (recomputed, young again) and dropped when its last user ends.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import random
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cachetools import TTLCache

from gptgate.media_tokens import part_tokens
from gptgate.tokens import CHARS_PER_TOKEN, MESSAGE_OVERHEAD_TOKENS, message_text

__all__ = [
    "KVLease",
    "KVPrefixCache",
    "PrefixCache",
    "PrefixRouter",
    "block_digests",
    "canonical_text",
    "media_placeholder",
    "route_key",
]

_HEADER_CHARS = MESSAGE_OVERHEAD_TOKENS * CHARS_PER_TOKEN


def canonical_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The prompt as one string of exactly ``4 × estimate_prompt_tokens(messages)`` chars
    (each image, audio or file part a :func:`media_placeholder` of its tokens)."""
    parts: list[str] = []
    for m in messages:
        role = m.get("role")
        header = f"<|{role}|>"[:_HEADER_CHARS].ljust(_HEADER_CHARS, "\x00")
        text = message_text(m)
        pad = -len(text) % CHARS_PER_TOKEN
        parts.append(header)
        parts.append(text)
        if pad:
            parts.append("\x00" * pad)
        content = m.get("content")
        for part in content if isinstance(content, list) else ():
            tokens = part_tokens(part) if isinstance(part, Mapping) else 0
            if tokens:
                parts.append(media_placeholder(part, tokens))
    return "".join(parts)


def media_placeholder(part: Mapping[str, Any], tokens: int) -> str:
    """An image, audio or file part in the canonical prompt: exactly ``tokens`` tokens of
    characters that name its content (a digest), so a prompt's cache blocks change with its
    images as with its text, and token ``i`` is still character ``4·i``."""
    digest = hashlib.blake2b(
        json.dumps(part, sort_keys=True, default=str).encode(), digest_size=8
    ).hexdigest()
    return digest[: tokens * CHARS_PER_TOKEN].ljust(tokens * CHARS_PER_TOKEN, "\x00")


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def block_digests(canonical: str, block_tokens: int) -> list[bytes]:
    """Chained digests of each full block: ``d[i]`` identifies tokens ``[0, (i+1)·block)``."""
    block_chars = block_tokens * CHARS_PER_TOKEN
    h = hashlib.blake2b(digest_size=16)
    out: list[bytes] = []
    ends = range(0, len(canonical) - block_chars + 1, block_chars)
    if canonical.isascii():  # one byte a character: encode once, hash slices of the bytes
        data = memoryview(canonical.encode("ascii"))
        for start in ends:
            h.update(data[start : start + block_chars])
            out.append(h.copy().digest())
        return out
    for start in ends:
        h.update(_encode(canonical[start : start + block_chars]))
        out.append(h.copy().digest())
    return out


def route_key(canonical: str, route_tokens: int, cache_key: str | None) -> int:
    """The routing hash: the first ``route_tokens`` tokens plus ``prompt_cache_key``."""
    h = hashlib.blake2b(_encode(canonical[: route_tokens * CHARS_PER_TOKEN]), digest_size=8)
    if cache_key:
        h.update(b"\x00key\x00")
        h.update(_encode(cache_key))
    return int.from_bytes(h.digest(), "big")


class PrefixCache:
    """One replica's cached prefixes (a set of block digests with idle TTL and LRU bound).

    An ordered dict of digest -> expiry, oldest write first: the LRU order and the TTL order
    at once (every write is at the clock's now, which never goes back), so one clock read
    serves a whole request's chain — ``cachetools.TTLCache`` read the clock per block, the
    simulator's hottest spot on long prompts. An expired entry is invisible at once and
    dropped lazily (by the next write that finds it at the front, or ``len``)."""

    __slots__ = ("_blocks", "_max_blocks", "_min_blocks", "_refresh", "_timer", "_ttl")

    def __init__(
        self,
        *,
        min_blocks: int,
        max_blocks: int,
        ttl_s: float,
        timer: Callable[[], float],
        refresh: bool = True,
    ) -> None:
        self._min_blocks = max(1, min_blocks)
        if max_blocks < 1:
            raise ValueError("max_blocks must be >= 1")
        self._max_blocks = max_blocks
        self._ttl = ttl_s
        self._timer = timer
        self._blocks: OrderedDict[bytes, float] = OrderedDict()
        #: a hit (or a re-insert) makes an entry young again; False: it ages from its write
        self._refresh = refresh

    def lookup(self, digests: Sequence[bytes]) -> int:
        """Number of leading blocks cached (0 below the minimum); refreshes what it used.

        The chain is walked from the shortest cacheable prefix and stops at the first miss,
        so a miss costs one probe."""
        low = self._min_blocks
        get = self._blocks.get
        now = self._timer()
        n = 0
        for i in range(low - 1, len(digests)):
            expires = get(digests[i])
            if expires is None or not now < expires:
                break
            n = i + 1
        if n and self._refresh:
            self._touch(digests[low - 1 : n], now)
        return n

    def insert(self, digests: Sequence[bytes]) -> None:
        """Make every cacheable prefix of a just-prefilled prompt available."""
        self._touch(digests[self._min_blocks - 1 :], self._timer())

    def _touch(self, chain: Sequence[bytes], now: float) -> None:
        # longest first, so the LRU evicts the tails of a chain before its shared head
        blocks = self._blocks
        refresh = self._refresh
        expires = now + self._ttl
        self._expire(now)
        room = self._max_blocks
        for d in reversed(chain):
            old = blocks.get(d)
            if old is not None and now < old:
                if refresh:  # re-setting refreshes both the TTL and the LRU position
                    blocks.move_to_end(d)
                    blocks[d] = expires
                continue
            if old is not None:  # expired, not dropped yet: written anew, youngest
                del blocks[d]
            while len(blocks) >= room:
                blocks.popitem(last=False)  # the least recently written (expired ones first)
            blocks[d] = expires

    def _expire(self, now: float) -> None:
        # oldest first, and expiry follows write order: drop from the front until a live one
        blocks = self._blocks
        while blocks and not now < next(iter(blocks.values())):
            blocks.popitem(last=False)

    def __len__(self) -> int:
        self._expire(self._timer())
        return len(self._blocks)


class KVLease:
    """The KV blocks one running sequence holds on a :class:`KVPrefixCache`.

    ``pinned`` leading prompt blocks are shared cache entries (they count once however many
    sequences hold them); ``private`` blocks are its own (an uncached prompt until it is
    prefilled, the answer, a partial last block)."""

    __slots__ = ("_cache", "digests", "pinned", "private", "released")

    def __init__(
        self, cache: KVPrefixCache, digests: Sequence[bytes], pinned: int, private: int
    ) -> None:
        self._cache = cache
        self.digests = digests
        self.pinned = pinned
        self.private = private
        self.released = False

    def publish(self) -> None:
        """The prompt has been prefilled: its full blocks become shared cache entries."""
        if not self.released:
            self._cache._publish(self)

    def release(self) -> None:
        """The sequence ended: its blocks go back to the free pool (exactly once)."""
        if not self.released:
            self.released = True
            self._cache._release(self)


class KVPrefixCache:
    """One replica's KV blocks: running sequences first, cached prefixes in what is left.

    ``refs`` maps a cached block in use to the number of running sequences sharing it; ``free``
    holds cached blocks no sequence uses, oldest first (the LRU order and the TTL order at
    once, since a block enters it when its last user ends). Every operation costs O(blocks of
    the request) dictionary work, like :class:`PrefixCache`."""

    __slots__ = ("_ages", "_born", "_budget", "_free", "_max_blocks", "_min_blocks",
                 "_private", "_refresh", "_refs", "_timer", "_ttl")

    def __init__(
        self,
        *,
        budget: int,
        min_blocks: int,
        max_blocks: int,
        ttl_s: float,
        timer: Callable[[], float],
        refresh: bool = True,
    ) -> None:
        self._budget = budget
        self._min_blocks = max(1, min_blocks)
        self._max_blocks = max_blocks
        self._ttl = ttl_s
        self._timer = timer
        self._refs: dict[bytes, int] = {}
        self._free: OrderedDict[bytes, float] = OrderedDict()
        self._private = 0
        #: without refresh on hit: when each cached block was computed (its age runs from then)
        self._refresh = refresh
        self._born: dict[bytes, float] = {}
        #: (birth, digest) of the blocks put in ``free``, oldest first; an entry whose block
        #: has left ``free`` since is skipped when it comes up
        self._ages: list[tuple[float, bytes]] = []

    @property
    def budget(self) -> int:
        return self._budget

    @property
    def used(self) -> int:
        """Blocks held by running sequences (shared blocks once)."""
        return len(self._refs) + self._private

    @property
    def free_cached(self) -> int:
        """Cached blocks no running sequence uses (the evictable prefix cache)."""
        self._expire()
        return len(self._free)

    def __len__(self) -> int:
        self._expire()
        return len(self._refs) + len(self._free)

    def cached(self, digests: Sequence[bytes]) -> int:
        """Number of leading blocks cached (0 below the minimum), without touching anything."""
        self._expire()
        n = 0
        refs, free = self._refs, self._free
        stale = None if self._refresh else self._timer() - self._ttl
        for d in digests:
            if d not in refs and d not in free:
                break
            if stale is not None and self._born.get(d, stale) <= stale:
                break  # in use, but computed longer ago than the lifetime: a miss
            n += 1
        return n if n >= self._min_blocks else 0

    def admit(self, digests: Sequence[bytes], blocks: int) -> KVLease:
        """A sequence of ``blocks`` KV blocks starts: it shares the cached head of its prompt
        and takes the rest from the free pool, evicting the least recently used prefixes."""
        n = self.cached(digests)
        refs, free = self._refs, self._free
        for d in digests[:n]:
            r = refs.get(d)
            if r is None:
                del free[d]
                refs[d] = 1
            else:
                refs[d] = r + 1
        private = max(0, blocks - n)
        self._private += private
        self._squeeze()
        return KVLease(self, digests, n, private)

    def _publish(self, lease: KVLease) -> None:
        refs, free = self._refs, self._free
        digests = lease.digests
        if not self._refresh:
            self._note_born(digests[lease.pinned :])
        for d in digests[lease.pinned :]:
            r = refs.get(d)
            if r is None:
                free.pop(d, None)  # computed twice (a burst): keep one copy, shared
                refs[d] = 1
            else:
                refs[d] = r + 1
        moved = min(len(digests) - lease.pinned, lease.private)
        lease.pinned = len(digests)
        lease.private -= moved
        self._private -= moved
        self._squeeze()

    def _release(self, lease: KVLease) -> None:
        now = self._timer()
        refs, free = self._refs, self._free
        born = None if self._refresh else self._born
        # tail first, so that the LRU evicts the tails of a chain before its shared head
        for d in reversed(lease.digests[: lease.pinned]):
            r = refs[d] - 1
            if r:
                refs[d] = r
            else:
                del refs[d]
                if born is None:
                    free[d] = now
                else:  # it ages from its computation: kept only while younger than the TTL
                    t = born.get(d, now)
                    if t > now - self._ttl:
                        free[d] = t
                        heapq.heappush(self._ages, (t, d))
                    else:
                        born.pop(d, None)
        self._private -= lease.private
        lease.pinned = lease.private = 0
        self._squeeze()

    def _note_born(self, computed: Sequence[bytes]) -> None:
        """Blocks just computed by a prefill are young, unless a live copy exists (a burst
        computing the same prefix twice keeps the first copy's age)."""
        now = self._timer()
        stale = now - self._ttl
        born = self._born
        for d in computed:
            if born.get(d, stale) <= stale:
                born[d] = now

    def _expire(self) -> None:
        free = self._free
        if not free:
            return
        horizon = self._timer() - self._ttl
        if self._refresh:
            while free and next(iter(free.values())) <= horizon:
                free.popitem(last=False)
            return
        # without refresh the values are birth times, not in release order: a heap of them
        ages = self._ages
        while ages and ages[0][0] <= horizon:
            t, d = heapq.heappop(ages)
            if free.get(d) == t:
                del free[d]
                self._born.pop(d, None)

    def _squeeze(self) -> None:
        self._expire()
        free = self._free
        room = min(self._budget - self.used, self._max_blocks - len(self._refs))
        while len(free) > max(0, room):
            d, _ = free.popitem(last=False)
            if not self._refresh:
                self._born.pop(d, None)


class PrefixRouter:
    """Chooses a replica: affine to the prefix, spreading a hot prefix once it overflows."""

    __slots__ = ("_overflow_rpm", "_rates", "_replicas", "_rng", "_timer")

    _WINDOW_S = 60.0

    def __init__(
        self,
        replicas: int,
        overflow_rpm: float | None,
        *,
        timer: Callable[[], float],
        rng: random.Random,
        max_keys: int = 4096,
    ) -> None:
        self._replicas = replicas
        self._overflow_rpm = overflow_rpm
        self._timer = timer
        self._rng = rng
        # per route key: [window start, count in window, count in previous window]
        self._rates: TTLCache[int, list[float]] = TTLCache(
            max_keys, 2 * self._WINDOW_S, timer=timer
        )

    def pick(self, key: int) -> int:
        n = self._replicas
        base = key % n
        if n == 1 or self._overflow_rpm is None:
            return base
        spread = min(n, math.ceil(self._rate(key) / self._overflow_rpm))
        if spread <= 1:
            return base
        return (base + self._rng.randrange(spread)) % n

    def _rate(self, key: int) -> float:
        """Requests in the last minute for ``key`` including this one (sliding window)."""
        now = self._timer()
        w = self._WINDOW_S
        state = self._rates.get(key)
        if state is None:
            state = [now, 0.0, 0.0]
        elapsed = now - state[0]
        if elapsed >= w:
            windows = math.floor(elapsed / w)
            state[2] = state[1] if windows == 1 else 0.0
            state[1] = 0.0
            state[0] += windows * w
            elapsed = now - state[0]
        state[1] += 1
        self._rates[key] = state
        return state[2] * (1.0 - elapsed / w) + state[1]
