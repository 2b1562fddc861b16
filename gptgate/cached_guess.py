"""What a cut answer's prompt read from the cache, when its server never said.

An OpenAI-style stream reports its usage after the last delta: one its caller leaves, or the
server cuts, says nothing of its prompt, and was booked as the whole prompt at the full
input price. Over a cached system prompt that is several times the bill (240 streams over
a ~2,000-token prefix, left after 1-30 deltas: $1.71 booked where the server billed $0.51).
The last whole answer of the same prompt prefix on the same backend says how much of it the
server's cache served; within a cache's lifetime, a cut answer of that prefix is booked as
reading as much (an estimate, as the rest of a cut answer's booking is).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cachetools import TTLCache

from .cache import prefix_key
from .results import Usage
from .wire.usage import cut_usage

if TYPE_CHECKING:
    from .clock import Clock

__all__ = ["CACHE_LIFETIME_S", "CachedGuess", "prefix_of"]

#: how long a prefix's last answer is trusted: providers keep an idle prefix 5-10 minutes
#: (OpenAI's in-memory cache; Anthropic's default ephemeral marker: 5 minutes)
CACHE_LIFETIME_S = 300.0
#: (backend, prefix) pairs remembered at most: a few hundred bytes each
_MAX_PREFIXES = 4096


class CachedGuess:
    """Per (backend, prompt prefix): the cache reads of its last whole answer. A prefix is
    hashed only on a backend whose answers have read from a cache (``prefix`` is called
    lazily): a backend without a prompt cache costs nothing per call."""

    def __init__(self, clock: Clock, lifetime_s: float = CACHE_LIFETIME_S) -> None:
        self._reads: TTLCache[tuple[str, str], int] = TTLCache(
            maxsize=_MAX_PREFIXES, ttl=lifetime_s, timer=clock.now
        )
        #: backends an answer has read cache on
        self._caching: set[str] = set()

    def answered(self, backend: str, usage: Usage, prefix: Callable[[], str | None]) -> None:
        """A whole answer's server-counted usage (an estimated one teaches nothing); a miss
        after hits is remembered too (the prefix expired)."""
        if usage.estimated or not (usage.cached_input_tokens or backend in self._caching):
            return
        key = prefix()
        if key is not None:
            self._caching.add(backend)
            self._reads[(backend, key)] = usage.cached_input_tokens

    def reads(self, backend: str, prefix: Callable[[], str | None]) -> int:
        """The cache reads of the prefix's last whole answer on ``backend`` within the
        lifetime (0: none known)."""
        if backend not in self._caching:
            return 0
        key = prefix()
        return 0 if key is None else self._reads.get((backend, key), 0)

    def cut(
        self, backend: str, prefix: Callable[[], str | None], said: Usage | None, prompt: int,
        output: int,
    ) -> Usage:
        """A cut answer's booking (wire/usage.py ``cut_usage``): where its server did not
        say, its prompt read what its prefix's last whole answer read from the cache."""
        guess = self.reads(backend, prefix) if said is None and prompt else 0
        return cut_usage(said, prompt, output, guess)


def prefix_of(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The prompt-prefix group a call's messages fall in (gptgate/cache.py), None without."""
    group = prefix_key(messages)
    return group.key if group is not None else None
