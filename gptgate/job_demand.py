"""The calls ``gate.map`` knows are still to come: the job's length, for the rate ceiling
(issue 31, round 11: "the job's length").

Under an RPM/TPM limit, the pace that spends the bucket exactly as the work ends is
``r·D/(D − B)`` for ``D`` calls left and a bucket of ``B``: faster only adds latency at the
server, slower leaves budget unspent when the job ends (family draw 1029: a 35-s job ended at
45 s with ~50 calls of budget left). The limit sees only the calls waiting or in flight
(``gate.map`` feeds ~256 at a time); a ``map`` over a sized sequence knows the rest
(gptgate/limits/rate_ceiling.py reads it). Unsized sources (generators) and ``gate.chat``
traffic give no length: the demand is then unknown, and the limit paces as without it.
"""

from __future__ import annotations

from collections.abc import Sized

__all__ = ["JobDemand", "MapJob"]


class MapJob:
    """One running ``map``'s share of the demand: its items not yet pulled from the source."""

    def __init__(self, owner: JobDemand, items: int | None) -> None:
        self._owner = owner
        self._left = items

    def pulled(self) -> None:
        """An item left the source (it now waits for a permit or runs: counted there)."""
        if self._left is not None and self._left > 0:
            self._left -= 1
            self._owner.unsent -= 1

    def close(self) -> None:
        """The map ended (or failed): its unpulled items are no longer coming."""
        if self._left is None:
            self._owner.unsized -= 1
        else:
            self._owner.unsent -= self._left
        self._owner.running -= 1

    async def __aenter__(self) -> MapJob:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()  # however the map ends: done, failed or cancelled


class JobDemand:
    """The gateway's running maps: how many items they will still send, when all are sized."""

    def __init__(self) -> None:
        #: items of sized maps not yet pulled from their source
        self.unsent = 0
        #: maps running over a source of unknown length (the demand is then unknown)
        self.unsized = 0
        #: maps running
        self.running = 0

    def start(self, items: object) -> MapJob:
        """Count a ``map`` over ``items`` (its length when it is ``Sized``) until its job is
        closed (once, when the map ends)."""
        size = len(items) if isinstance(items, Sized) else None
        self.running += 1
        if size is None:
            self.unsized += 1
        else:
            self.unsent += size
        return MapJob(self, size)

    def unsent_calls(self) -> int | None:
        """Calls the running maps will still send, or ``None`` when unknown: no map runs (a
        ``gate.chat``-only load) or one reads a source of unknown length."""
        if self.running == 0 or self.unsized > 0:
            return None
        return self.unsent
