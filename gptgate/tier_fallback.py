"""A small-tier answer kept only because its escalation could not run is not stored.

When a ``tier="auto"`` call's small answer looks failed (empty, invalid JSON, rejected by
``accept``) and no large-tier backend can take it, or the large call fails, the small answer
is returned as it is (docs/tiers.md). That is the best answer *now*, for want of the large
tier: stored by the response cache, it was served to every identical request for the
whole TTL — the large tier, back a minute later, never asked. So the tiering says so here,
and the cache's leader (gptgate/response_cache.py) does not store such an answer.

A context variable, not a field of ``ChatResult``: the cache's call and the tiering run in
the same task (the cache awaits the call), and nothing else needs to know.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["kept_for_want_of_large", "watching"]

_KEPT: ContextVar[list[bool] | None] = ContextVar("gptgate_kept_for_want_of_large", default=None)


@contextmanager
def watching() -> Iterator[list[bool]]:
    """Around a call whose answer may be stored: the list is non-empty if its answer was
    kept for want of the large tier."""
    holder: list[bool] = []
    token = _KEPT.set(holder)
    try:
        yield holder
    finally:
        _KEPT.reset(token)


def kept_for_want_of_large() -> None:
    """The tiering returns a failed-looking small answer because the large tier could not
    answer (none up, or its call failed)."""
    holder = _KEPT.get()
    if holder is not None:
        holder.append(True)
