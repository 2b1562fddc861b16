"""``gate.stream`` through the response cache: a hit is replayed, a whole miss is stored.

A cached answer is streamed back in pieces (so code written for deltas runs unchanged) with
``s.result.from_cache`` set; a live stream is stored only once it ended with a finish reason —
a stream cut, interrupted or left early is never cached. Streams do not join identical calls
in flight (their text is shown as it arrives): ``gate.chat`` does.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import replace
from typing import TYPE_CHECKING

from .gateway import ChatStream
from .response_cache import CacheMode, cacheable, served_from_cache

if TYPE_CHECKING:
    from .calls import CallRunner, CallSpec
    from .clock import Clock
    from .lifecycle import CallRegistry
    from .response_cache_calls import CachedCalls
    from .tiers import Tiering

__all__ = ["ReplayingStream"]

#: characters per replayed delta (about a token's worth of several tokens)
_PIECE = 64


class ReplayingStream(ChatStream):
    """A ``ChatStream`` that reads the response cache first and stores what it streamed."""

    def __init__(
        self,
        runner: CallRunner,
        spec: CallSpec,
        clock: Clock,
        calls: CallRegistry | None,
        tiering: Tiering | None,
        *,
        cached: CachedCalls,
        key: str,
        mode: CacheMode | None,
    ) -> None:
        super().__init__(runner, spec, clock, calls, tiering)
        self._cached = cached
        self._key = key
        self._mode = mode

    async def _collect(self) -> AsyncGenerator[str, None]:
        cache = self._cached.cache
        assert cache is not None
        start = self._runner.clock.now()
        if self._mode != "refresh":
            hit = await cache.get(self._key)
            if hit is not None:
                replayed = replace(
                    served_from_cache(hit, self._runner.clock.now() - start), streamed=True
                )
                cache.count(replayed.backend).hits += 1
                self._cached.hit(replayed)
                self._state.result = replayed
                text = replayed.text
                for at in range(0, len(text), _PIECE):
                    piece = text[at : at + _PIECE]
                    self._parts.append(piece)
                    yield piece
                return
        async for delta in super()._collect():
            yield delta
        result = self._state.result
        if result is not None:
            cache.count(result.backend).misses += 1
            if cacheable(result):
                private = self._cached.is_private(result.backend)
                await cache.put(self._key, result, private=private)
