"""Injected failures: random ones from a seeded :class:`FaultPlan`, exact ones by header.

Random faults exercise a gateway statistically (benchmarks); the ``x-sim-fault`` request
header scripts one exact failure for a test:

``500`` / ``503`` / ``429``
    answered at once with that status (429 carries ``retry-after``);
``reset``
    the connection drops mid-body (mid-stream for SSE): the client sees a read error;
``stall`` or ``stall=<seconds>``
    the response pauses (after the first chunk when streaming) for ``stall_s`` seconds;
``garbage``
    a malformed JSON body, or one malformed SSE event inside an otherwise good stream.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["FAULT_HEADER", "Fault", "FaultPlan", "FaultSpecError"]

FAULT_HEADER = "x-sim-fault"

FaultKind = Literal["500", "503", "429", "reset", "stall", "garbage"]
_KINDS: dict[str, FaultKind] = {
    "500": "500",
    "503": "503",
    "429": "429",
    "reset": "reset",
    "stall": "stall",
    "garbage": "garbage",
}


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


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Rates of random faults per request, drawn from ``seed``. All zero: no random faults
    (the header still works)."""

    seed: int = 0
    error_rate: float = 0.0
    reset_rate: float = 0.0
    stall_rate: float = 0.0
    stall_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("error_rate", "reset_rate", "stall_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")
        if self.error_rate + self.reset_rate + self.stall_rate > 1.0:
            raise ValueError("error_rate + reset_rate + stall_rate must not exceed 1")
        if self.stall_s < 0:
            raise ValueError("stall_s must be >= 0")

    @property
    def active(self) -> bool:
        return self.error_rate > 0 or self.reset_rate > 0 or self.stall_rate > 0

    def draw(self, rng: random.Random) -> Fault | None:
        """A random fault for one request, or None. 5xx faults are 500 or 503 evenly."""
        if not self.active:
            return None
        u = rng.random()
        if u < self.error_rate:
            return Fault("500" if rng.random() < 0.5 else "503")
        u -= self.error_rate
        if u < self.reset_rate:
            return Fault("reset")
        u -= self.reset_rate
        if u < self.stall_rate:
            return Fault("stall", self.stall_s)
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
