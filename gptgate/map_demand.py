"""The calls ``gate.map`` jobs over sized iterables have yet to pull: the work ahead of the
limit beyond what it sees waiting or in flight (issue 31, round 13).

An adaptive limit under an RPM/TPM bucket sizes its rate ceiling by the pace that spends the
bucket (gptgate/limits/rate_ceiling.py). What it sees is the calls waiting or in flight, and
``map`` keeps a bounded look-ahead of them (256 on one backend), so a 400-call job and a
1,000-call one look the same: spread over the limits' minute, the bucket outlasted a 35-s job
(family draw 1029: ~50 calls of budget unspent at its end, 75% of fixed 16's goodput). A
``map`` over a list (or anything with a ``len()``) knows how many calls are still to come.

Several jobs at once add up; a job over an unsized iterable (a generator) makes the work ahead
unknown (``None``) while it runs, as does no job at all: plain calls say nothing of what
follows them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["MapBacklog", "MapJob"]


class MapJob:
    """One running job: the items of it not pulled yet (None: its length is unknown)."""

    __slots__ = ("unsent",)

    def __init__(self, unsent: int | None) -> None:
        self.unsent = unsent

    def pulled(self) -> None:
        """One more item pulled (a call in flight or waiting now: the limit sees it)."""
        if self.unsent is not None and self.unsent > 0:
            self.unsent -= 1


class MapBacklog:
    """The running ``map`` jobs of one gateway, and the calls they have yet to pull."""

    def __init__(self) -> None:
        self._jobs: list[MapJob] = []

    @contextmanager
    def job(self, items: object) -> Iterator[MapJob]:
        """A job over ``items`` for as long as it runs: sized by ``len(items)`` when it has
        one (a list, a tuple, a range, any ``Sized``), else of unknown length."""
        job = MapJob(_length(items))
        self._jobs.append(job)
        try:
            yield job
        finally:
            self._jobs.remove(job)

    def ahead(self) -> int | None:
        """The calls the running jobs have yet to pull, summed; None while none runs or one
        of them has no known length (more may come than anyone can tell)."""
        if not self._jobs:
            return None
        total = 0
        for job in self._jobs:
            if job.unsent is None:
                return None
            total += job.unsent
        return total


def _length(items: object) -> int | None:
    """``len(items)``, or None for an iterable without one (or whose ``__len__`` fails)."""
    size = getattr(items, "__len__", None)
    if size is None:
        return None
    try:
        n = int(size())
    except Exception:  # a broken __len__ only loses the hint, never the job
        return None
    return n if n >= 0 else None
