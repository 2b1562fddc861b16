"""A batch job and the response cache (docs/batch.md, docs/response-cache.md).

A batch item is a ``gate.chat`` request sent another way, so it uses the response cache as
that call would — by the same rule (``cache=``, else a deterministic request) and under the
same key (gptgate/response_cache.py ``request_key``):

- **stored**: each answer the Batch API returned whole is stored under the item's key, so a
  later ``gate.chat`` with the same request is served from the cache ($0, no request). The
  key is the one a live call with the item's own routing options (``tier``, ``backend``,
  ``private``) would have when the batch's backend is within its reach; otherwise the one of
  a live call pinned to that backend (``backend=NAME``).
- **read**: an item whose answer is cached is answered from the cache and left out of the
  batch (not uploaded, not billed), as the live call would have been answered. It is read
  once, when the job is first submitted, and kept in ``job_dir`` with the live retries'
  answers: a process that resumes the job returns the same answer and sends the same parts,
  whatever its own cache holds by then (the job's identity is still every item's request).

Answered from the cache, an item's result is a cache hit as a live one is: ``from_cache``,
$0, ``attempts=0``, a span with ``gptgate.cache_hit``, ``response_cache_hits`` in the ledger.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .errors import BadRequestError, GateError
from .response_cache import CacheMode, cacheable, check_cache_mode, served_from_cache
from .results import ChatResult

if TYPE_CHECKING:
    from .config import Backend
    from .gateway import Gateway

__all__ = ["BatchCache"]


class BatchCache:
    """The cache keys of a job's items (those the cache applies to), and their answers."""

    def __init__(
        self, gate: Gateway, backend: Backend, items: Sequence[Mapping[str, Any]],
        options: Collection[str],
    ) -> None:
        """``items``: every item's merged ``chat`` arguments; ``options``: the argument
        names that are no request parameter (``scenario``, ``tier``, ``cache``, …)."""
        self._cached = gate._cached
        self._backend = backend
        self._backends = gate.config.backends
        #: per item the cache applies to: its key and its ``cache=`` mode
        self.keys: dict[int, tuple[str, CacheMode | None]] = {}
        for index, kwargs in enumerate(items):
            params = {k: v for k, v in kwargs.items() if k not in options}
            mode = kwargs.get("cache")
            try:
                applies = self._cached.applies(mode, params)
            except BadRequestError as error:
                raise BadRequestError(f"item {index}: {error.message}") from None
            if applies:
                self.keys[index] = (self._key(kwargs, params), check_cache_mode(mode))

    def _key(self, kwargs: Mapping[str, Any], params: Mapping[str, Any]) -> str:
        tier, backend = kwargs.get("tier", "auto"), kwargs.get("backend")
        private = bool(kwargs.get("private", False))
        mine = self._backend
        reaches = (
            (tier == "auto" or mine.tier == tier)
            and (backend is None or backend == mine.name)
            and (not private or mine.private)
        )
        if not reaches:  # the live call that would reach the batch's backend: pinned to it
            tier, backend, private = "auto", mine.name, False
        return self._cached.key(
            kwargs["messages"], params, tier=tier, backend=backend, private=private
        )

    async def answered(self) -> dict[int, ChatResult]:
        """The items whose answer is cached (``cache="refresh"`` ones are sent), each
        recorded as a hit as a live call's would be."""
        cache = self._cached.cache
        hits: dict[int, ChatResult] = {}
        if cache is None:
            return hits
        for index, (key, mode) in self.keys.items():
            if mode == "refresh":
                continue
            found = await cache.get(key)
            if found is None:
                continue
            result = served_from_cache(found, 0.0)
            cache.count(result.backend).hits += 1
            self._cached.hit(result)
            hits[index] = result
        return hits

    async def store(
        self, outcomes: Mapping[int, ChatResult | GateError], skip: Collection[int]
    ) -> None:
        """Store the batch's whole answers (not ``skip``: answered live or from the cache,
        which stored or came from it already)."""
        cache = self._cached.cache
        if cache is None:
            return
        for index, (key, _) in self.keys.items():
            outcome = outcomes.get(index)
            if index in skip or not isinstance(outcome, ChatResult):
                continue
            cache.count(outcome.backend).misses += 1  # sent, as a live call's miss
            if cacheable(outcome):
                await cache.put(key, outcome, private=self._cached.is_private(outcome.backend))
