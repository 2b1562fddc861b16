"""Fleet-wide ``concurrency="auto"``, the pure half: what a process publishes of each finished
call, and the leader that turns every process's samples into one limit.

No Redis and no I/O here (gptgate/shared/auto.py moves the bytes): the codec is a function of
its input, and :class:`FleetLeader` is driven by explicit ``now``/``wall`` readings, so it is
tested with exact values like any other :class:`~gptgate.limits.Limit`.

A sample crosses processes on the fleet's clock — Redis's, which the acquire script read when
it granted the permit — in real seconds: each process's gateway clock may be scaled (a
simulator's time scale) or simply started at another moment, and its wall clock may be off,
so the leader maps a sample back onto *its* clock by how long ago, on Redis's clock, the
permit was granted. Its in-flight count is the fleet's (the leases Redis counted when it was
granted), so the one ``LLMLimit`` sees the fleet as one gateway would: N processes at the
knee, not N knees.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from ..limits.base import Limit, Sample

__all__ = ["FleetLeader", "FleetSample", "decode", "encode"]


@dataclass(frozen=True, slots=True)
class FleetSample:
    """One finished attempt, as a process publishes it (times in real seconds)."""

    #: the fleet's clock (Redis's, s) when the fleet permit was granted
    granted_wall: float
    #: how long the permit was held (the attempt, and any wait before its send)
    hold_s: float
    latency_s: float
    #: leases the fleet counted when this one was granted, itself included
    inflight: int
    kind: Literal["ok", "dropped"]
    ttft_s: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    congestion: bool = True
    rate_limited: bool = False
    #: the fleet's cap the acquire applied when it granted the permit (0: not known, a
    #: record of an older version): the limit this call ran under
    cap: int = 0


def _ms(seconds: float) -> str:
    return str(round(seconds * 1000.0, 1)).removesuffix(".0")


def encode(samples: Iterable[FleetSample]) -> str:
    """A batch as one short string: ``;``-separated records of ``,``-separated fields
    (about 40 bytes a call; a record of eight fields, from an older version, has no cap)."""
    records = []
    for s in samples:
        if s.kind == "ok":
            kind = "o"
        else:
            kind = "d" + ("c" if s.congestion else "") + ("r" if s.rate_limited else "")
        ttft = "" if s.ttft_s is None else _ms(s.ttft_s)
        records.append(
            f"{round(s.granted_wall * 1000.0)},{_ms(s.hold_s)},{_ms(s.latency_s)},{s.inflight},"
            f"{kind},{ttft},{s.input_tokens},{s.output_tokens},{s.cap}"
        )
    return ";".join(records)


def decode(blob: str | bytes) -> list[FleetSample]:
    """The samples of one batch; a record that does not parse (another version of gptgate
    in the fleet, say) is skipped, never raised."""
    text = blob.decode() if isinstance(blob, bytes) else blob
    samples = []
    for record in text.split(";"):
        fields = record.split(",")
        if len(fields) not in (8, 9) or fields[4][:1] not in ("o", "d"):
            continue
        try:
            granted, hold, latency, inflight = (float(f) for f in fields[:4])
            kind = fields[4]
            ttft = float(fields[5]) / 1000.0 if fields[5] else None
            sample = FleetSample(
                granted_wall=granted / 1000.0,
                hold_s=max(0.0, hold / 1000.0),
                latency_s=max(0.0, latency / 1000.0),
                inflight=max(1, int(inflight)),
                kind="ok" if kind == "o" else "dropped",
                ttft_s=ttft,
                input_tokens=max(0, int(fields[6])),
                output_tokens=max(0, int(fields[7])),
                congestion=kind == "o" or "c" in kind,
                rate_limited="r" in kind,
                cap=max(0, int(fields[8])) if len(fields) == 9 else 0,
            )
        except ValueError:
            continue
        if not all(math.isfinite(v) for v in (granted, hold, latency)):
            continue
        samples.append(sample)
    return samples


class FleetLeader:
    """The leader's limit: one :class:`~gptgate.limits.Limit` fed with the whole fleet's
    samples. ``to_real`` is real seconds per second of the leader's clock.

    In one process a new limit applies at once; in a fleet only once it is published, a round
    later. A call the fleet granted in between ran under the old limit, so its sample is not
    evidence about the new one: it is left out (``stale``). Without that, a step up was
    measured with the old level's latency at the new level's in-flight count — an elasticity
    biased upwards, and a limit that climbed past the knee round after round (a fleet of two
    on a knee of 8 ended at 24-42, where one process ends at ~18). The publish is dated when
    the round was built, though, and on a loaded box another process's acquire may run
    before the round does, dated after it: the cap each sample's acquire applied is the
    evidence, its time only for records that lack one (after a loss cut from 64 to 29 on a
    server capped at 32, calls granted at 63 in flight met 503s and cut again, to 21)."""

    def __init__(self, limit: Limit, *, to_real: float = 1.0) -> None:
        if not to_real > 0.0:
            raise ValueError("to_real must be > 0")
        self.algorithm = limit
        self.to_real = to_real
        #: samples fed so far (the whole fleet's), and left out as granted before the limit
        #: then in force was published
        self.fed = 0
        self.stale = 0
        #: calls granted before this wall time ran under a limit already replaced
        self._stale_before = -math.inf
        #: the limit the fleet was last told (None: not yet)
        self._published: int | None = None

    @property
    def limit(self) -> int:
        return self.algorithm.limit

    @property
    def unpublished(self) -> bool:
        """Whether the limit moved since it was last published."""
        return self._published != self.algorithm.limit

    def published(self, wall: float) -> None:
        """The current limit reached the fleet at ``wall``: calls granted from then on ran
        under it."""
        if self.unpublished:
            self._published = self.algorithm.limit
            self._stale_before = wall

    def feed(self, samples: Iterable[FleetSample], *, now: float, wall: float) -> None:
        """Feed a drained batch: ``now`` is the leader's clock and ``wall`` the fleet's wall
        clock, read together. Each sample is dated on the leader's clock (granted ``wall −
        granted_wall`` real seconds ago, finished ``hold_s`` later — never after ``now``) and
        fed in the order the calls finished, with its finish as the limit's ``now``: the
        limit then measures what it would in one process, not the delay of the transport."""
        scale = 1.0 / self.to_real
        dated = []
        for s in samples:
            start = now - max(0.0, wall - s.granted_wall) * scale
            finish = min(now, start + s.hold_s * scale)
            dated.append((finish, start, s))
        dated.sort(key=lambda item: item[0])
        for finish, start, s in dated:
            if (
                s.granted_wall < self._stale_before
                or self.unpublished
                or (s.cap and s.cap != self._published)
            ):
                self.stale += 1
                continue
            self.algorithm.update(
                Sample(
                    start=start,
                    latency_s=s.latency_s * scale,
                    inflight=s.inflight,
                    kind=s.kind,
                    ttft_s=None if s.ttft_s is None else s.ttft_s * scale,
                    input_tokens=s.input_tokens,
                    output_tokens=s.output_tokens,
                    congestion=s.congestion,
                    rate_limited=s.rate_limited,
                ),
                finish,
            )
            self.fed += 1

    def __repr__(self) -> str:
        return f"FleetLeader({self.algorithm!r}, fed={self.fed}, stale={self.stale})"
