"""Injected failures: random ones from a seeded :class:`FaultPlan`, exact ones by header.

Random faults exercise a gateway statistically (benchmarks, the chaos suite); the
``x-sim-fault`` request header scripts one exact failure for a test:

``500`` / ``503`` / ``429``
    answered at once with that status (429 carries ``retry-after``);
``reset``
    the connection drops mid-body (mid-stream for SSE): the client sees a read error;
``drop``
    the connection drops before any response (nothing was done, nothing is billed);
``stall`` or ``stall=<seconds>``
    the response pauses (after the first chunk when streaming) for ``stall_s`` seconds;
``loris``
    the first byte never comes: the server holds the request without answering until the
    client gives up (nothing is billed);
``endless``
    the response never ends: a stream keeps sending keep-alive comments after its text, a JSON
    body trickles whitespace after its first half (billed as generated when the client leaves);
``garbage``
    a malformed JSON body, or one malformed SSE event inside an otherwise good stream.

A plan can also hold periodic **429 storms**: for ``storm_s`` seconds of every
``storm_every_s``, every request is refused with 429 and a ``retry-after`` to the storm's end.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import ConfigDict, ValidationInfo, field_validator
from pydantic.dataclasses import dataclass as validated_dataclass

__all__ = ["FAULT_HEADER", "Fault", "FaultPlan", "FaultSpecError"]

FAULT_HEADER = "x-sim-fault"

FaultKind = Literal["500", "503", "429", "reset", "drop", "stall", "loris", "endless", "garbage"]
_KINDS: dict[str, FaultKind] = {
    "500": "500",
    "503": "503",
    "429": "429",
    "reset": "reset",
    "drop": "drop",
    "stall": "stall",
    "loris": "loris",
    "endless": "endless",
    "garbage": "garbage",
}
_RATES = ("error_rate", "reset_rate", "drop_rate", "stall_rate", "loris_rate", "endless_rate",
          "garbage_rate")


class FaultSpecError(ValueError):
    """An ``x-sim-fault`` header the simulator does not understand (answered with a 400)."""


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault chosen for one request."""

    kind: FaultKind
    stall_s: float = 0.0

    @property
    def status(self) -> int | None:
        """The immediate error status, for the faults answered before any work."""
        return int(self.kind) if self.kind in ("500", "503", "429") else None


@validated_dataclass(
    frozen=True,
    slots=True,
    config=ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, validate_default=True),
)
class FaultPlan:
    """Rates of random faults per request, drawn from ``seed``, and periodic 429 storms. All
    zero: no random faults (the header still works). Validated like every config: a number
    given as a string, or half a storm, is a ``ValidationError`` naming the field."""

    seed: int = 0
    error_rate: float = 0.0
    reset_rate: float = 0.0
    stall_rate: float = 0.0
    stall_s: float = 30.0
    drop_rate: float = 0.0
    loris_rate: float = 0.0
    endless_rate: float = 0.0
    garbage_rate: float = 0.0
    #: a storm of ``storm_s`` seconds starts every ``storm_every_s`` (0: no storms), first at
    #: ``storm_every_s`` after the engine starts
    storm_every_s: float = 0.0
    storm_s: float = 0.0

    def __post_init__(self) -> None:
        for name in _RATES:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")
        if sum(getattr(self, name) for name in _RATES) > 1.0:
            raise ValueError("the fault rates must not add up to more than 1")
        if self.stall_s < 0:
            raise ValueError("stall_s must be >= 0")

    @field_validator("storm_s")
    @classmethod
    def _a_storm_has_a_period_and_a_length(cls, storm_s: float, info: ValidationInfo) -> float:
        """Either alone would never storm: refused, not silently ignored."""
        every = info.data.get("storm_every_s", 0.0)
        if every < 0 or storm_s < 0 or (every and storm_s >= every):
            raise ValueError("storms need 0 <= storm_s < storm_every_s")
        if (every > 0) != (storm_s > 0):
            raise ValueError(
                "storm_s and storm_every_s go together: a storm of storm_s seconds every "
                "storm_every_s seconds (one without the other never storms)"
            )
        return storm_s

    @property
    def active(self) -> bool:
        return any(getattr(self, name) > 0 for name in _RATES)

    def storm_left(self, elapsed_s: float) -> float:
        """Seconds left in the 429 storm at ``elapsed_s`` since the engine started (0: none)."""
        if not self.storm_every_s or elapsed_s < self.storm_every_s:
            return 0.0
        into = elapsed_s % self.storm_every_s
        return self.storm_s - into if into < self.storm_s else 0.0

    def draw(self, rng: random.Random) -> Fault | None:
        """A random fault for one request, or None. 5xx faults are 500 or 503 evenly."""
        if not self.active:
            return None
        u = rng.random()
        if u < self.error_rate:
            return Fault("500" if rng.random() < 0.5 else "503")
        u -= self.error_rate
        for kind, rate in (
            ("reset", self.reset_rate),
            ("drop", self.drop_rate),
            ("stall", self.stall_rate),
            ("loris", self.loris_rate),
            ("endless", self.endless_rate),
            ("garbage", self.garbage_rate),
        ):
            if u < rate:
                return Fault(_KINDS[kind], self.stall_s if kind == "stall" else 0.0)
            u -= rate
        return None

    def from_headers(self, headers: Mapping[str, str]) -> Fault | None:
        """The fault a request scripts with ``x-sim-fault``; raises :class:`FaultSpecError`."""
        spec = headers.get(FAULT_HEADER)
        if spec is None:
            return None
        spec = spec.strip().lower()
        kind, _, arg = spec.partition("=")
        if kind not in _KINDS:
            raise FaultSpecError(
                f"unknown {FAULT_HEADER} {spec!r}; use one of {', '.join(sorted(_KINDS))}"
            )
        if kind == "stall":
            try:
                seconds = float(arg) if arg else self.stall_s
            except ValueError:
                raise FaultSpecError(f"bad stall duration in {FAULT_HEADER} {spec!r}") from None
            return Fault("stall", max(0.0, seconds))
        return Fault(_KINDS[kind])
