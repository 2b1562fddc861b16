"""Prefix caching and prefix-affine routing, by OpenAI's published rules.

* The prompt's token stream is the messages serialized canonically: per message a 16-char
  header (the 4 tokens of chat-format overhead) and its text padded to whole tokens, so that
  character ``4·i`` is token ``i`` under :func:`gptgate.tokens.estimate_prompt_tokens`. A cache
  block of 128 tokens is then 512 characters, keyed by a chained hash of everything before it.
* Nothing is cached below ``cache_min_tokens`` (1024); the cached part of a request is the
  longest cached block-aligned prefix; a prefix is inserted only once a request carrying it
  has been prefilled (so a simultaneous burst all misses); entries expire after
  ``cache_ttl_s`` idle (each hit refreshes them) and the LRU bound evicts the oldest.
* Requests are routed to a replica by a hash of the first ~256 tokens plus
  ``prompt_cache_key``; above ``prefix_overflow_rpm`` requests/minute for one such key,
  traffic spreads over more replicas, each with its own cold cache.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cachetools import TTLCache

from gptgate.tokens import CHARS_PER_TOKEN, MESSAGE_OVERHEAD_TOKENS, message_text

__all__ = ["PrefixCache", "PrefixRouter", "block_digests", "canonical_text", "route_key"]

_HEADER_CHARS = MESSAGE_OVERHEAD_TOKENS * CHARS_PER_TOKEN


def canonical_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The prompt as one string of exactly ``4 × estimate_prompt_tokens(messages)`` chars."""
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
    return "".join(parts)


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def block_digests(canonical: str, block_tokens: int) -> list[bytes]:
    """Chained digests of each full block: ``d[i]`` identifies tokens ``[0, (i+1)·block)``."""
    block_chars = block_tokens * CHARS_PER_TOKEN
    h = hashlib.blake2b(digest_size=16)
    out: list[bytes] = []
    for start in range(0, len(canonical) - block_chars + 1, block_chars):
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
    """One replica's cached prefixes (a set of block digests with idle TTL and LRU bound)."""

    __slots__ = ("_blocks", "_min_blocks")

    def __init__(
        self, *, min_blocks: int, max_blocks: int, ttl_s: float, timer: Callable[[], float]
    ) -> None:
        self._min_blocks = max(1, min_blocks)
        self._blocks: TTLCache[bytes, None] = TTLCache(max_blocks, ttl_s, timer=timer)

    def lookup(self, digests: Sequence[bytes]) -> int:
        """Number of leading blocks cached (0 below the minimum); refreshes what it used.

        The chain is walked from the shortest cacheable prefix and stops at the first miss,
        so a miss costs one probe."""
        low = self._min_blocks
        blocks = self._blocks
        n = 0
        for i in range(low - 1, len(digests)):
            if digests[i] not in blocks:
                break
            n = i + 1
        if n:
            self._touch(digests[low - 1 : n])
        return n

    def insert(self, digests: Sequence[bytes]) -> None:
        """Make every cacheable prefix of a just-prefilled prompt available."""
        self._touch(digests[self._min_blocks - 1 :])

    def _touch(self, chain: Sequence[bytes]) -> None:
        # longest first, so the LRU evicts the tails of a chain before its shared head
        blocks = self._blocks
        for d in reversed(chain):
            blocks[d] = None  # (re-)setting refreshes both the TTL and the LRU position

    def __len__(self) -> int:
        self._blocks.expire()
        return len(self._blocks)


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
