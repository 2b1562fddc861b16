"""The baseline file: what each backend measured like, per concurrency band.

``gptgate profile`` writes it (gptgate/profiling.py); ``Gateway(baseline=...)`` reads it and
watches for drift (gptgate/drift.py). A backend's latency depends on how many calls it serves at
once, so figures are kept per *concurrency band* — a live backend is compared with what it did
at a similar load, never with its idle self.

The file is versioned JSON (``"version": 1``). A file that cannot be used is a
:class:`BaselineError`: one line naming the path and what is wrong with it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .config import Hardware
from .snapshot import save_state

__all__ = [
    "BANDS",
    "BackendBaseline",
    "Band",
    "BandFigures",
    "Baseline",
    "BaselineError",
    "band_of",
    "one_line",
]


@dataclass(frozen=True, slots=True)
class Band:
    """Calls in flight from ``low`` to ``high`` (None: no upper bound), and the concurrency
    ``gptgate profile`` measures it at by default (``level``)."""

    name: str
    low: int
    high: int | None
    level: int

    def holds(self, concurrency: int) -> bool:
        return self.low <= concurrency and (self.high is None or concurrency <= self.high)


#: The concurrency bands, defined once. Light load (1-4: a backend's best TTFT), medium
#: (5-15), the busy windows where real-time chat (20-30) and bulk work (30-50) run (16-40), and
#: past them (41+: where queueing grows non-linearly). ``level`` is a representative
#: concurrency inside each band.
BANDS: tuple[Band, ...] = (
    Band("1-4", 1, 4, 2),
    Band("5-15", 5, 15, 8),
    Band("16-40", 16, 40, 24),
    Band("41+", 41, None, 48),
)
BandName = Literal["1-4", "5-15", "16-40", "41+"]
_BAND_NAMES = frozenset(band.name for band in BANDS)
#: band by concurrency for the usual range (a list index per call instead of a search)
_BY_CONCURRENCY = [next(b for b in BANDS if b.holds(max(1, c))).name for c in range(0, 42)]


def band_of(concurrency: int) -> str:
    """The name of the band ``concurrency`` calls in flight fall in (0 counts as 1)."""
    if concurrency < len(_BY_CONCURRENCY):
        return _BY_CONCURRENCY[max(0, concurrency)]
    return BANDS[-1].name


class BaselineError(ValueError):
    """A baseline file that cannot be used: its message is one line naming the path."""


def one_line(error: ValidationError) -> str:
    """A pydantic error as one line: the first problem's field path and message."""
    problems = error.errors()
    first = problems[0]
    at = ".".join(str(part) for part in first["loc"]) or "document"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{at}: {first['msg']}{more}"


_FROZEN = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class BandFigures(BaseModel):
    """One backend's figures in one concurrency band. Latencies are seconds per call (queueing
    in the client excluded); ``output_tokens_per_s`` is output tokens over call time (a call's
    speed, not the backend's throughput). The optional fields drift compares like with like
    by (``decode_tokens_per_s``, ``output_tokens_mean``, ``uncached_input_tokens_mean``)
    are absent from files written before they were recorded."""

    model_config = _FROZEN

    #: the concurrency it was measured at
    concurrency: int = Field(ge=1)
    latency_p50_s: float = Field(ge=0)
    latency_p95_s: float = Field(ge=0)
    latency_p99_s: float = Field(ge=0)
    #: None when no streamed call gave a first token
    ttft_p50_s: float | None = Field(default=None, ge=0)
    ttft_p95_s: float | None = Field(default=None, ge=0)
    ttft_p99_s: float | None = Field(default=None, ge=0)
    output_tokens_per_s: float | None = Field(default=None, ge=0)
    #: output tokens after the first over the time after the first token (streamed calls):
    #: how fast it decodes, whatever the answers' length (gptgate/drift_measure.py)
    decode_tokens_per_s: float | None = Field(default=None, gt=0)
    #: output tokens per call, on average (live latency is compared at this length)
    output_tokens_mean: float | None = Field(default=None, ge=0)
    #: input tokens per call not served from cache, on average: live TTFT and latency are
    #: compared over calls whose prompt needs about as much prefill
    uncached_input_tokens_mean: float | None = Field(default=None, ge=0)
    #: cached over cacheable input tokens, over calls whose prefix could hit (>= 1,024 tokens,
    #: served before); None when no call could (a file from before: cached over all input)
    cache_hit_rate: float | None = Field(default=None, ge=0, le=1)
    #: successful calls behind the figures
    samples: int = Field(ge=1)
    failures: int = Field(default=0, ge=0)
    measured_at: datetime

    @field_validator("measured_at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return _utc(value)


class BackendBaseline(BaseModel):
    """The figures of one backend, keyed by band name; which backend it was (a gateway only
    compares a backend with the same model at the same base_url)."""

    model_config = _FROZEN

    name: str = Field(min_length=1)
    base_url: str = Field(min_length=1)
    model: str = Field(min_length=1)
    hardware: Hardware
    bands: dict[str, BandFigures]

    @field_validator("bands")
    @classmethod
    def _known_bands(cls, bands: dict[str, BandFigures]) -> dict[str, BandFigures]:
        unknown = sorted(set(bands) - _BAND_NAMES)
        if unknown:
            known = ", ".join(b.name for b in BANDS)
            raise ValueError(f"unknown band {unknown[0]!r}; the bands are {known}")
        for name, figures in bands.items():
            if band_of(figures.concurrency) != name:
                raise ValueError(
                    f"band {name!r} holds figures measured at concurrency "
                    f"{figures.concurrency}, which is in band {band_of(figures.concurrency)!r}"
                )
        return bands


class Baseline(BaseModel):
    """A versioned baseline: per backend, per concurrency band, the measured figures."""

    model_config = _FROZEN

    version: Literal[1] = 1
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    backends: list[BackendBaseline]

    @field_validator("created_at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return _utc(value)

    @field_validator("backends")
    @classmethod
    def _unique(cls, backends: list[BackendBaseline]) -> list[BackendBaseline]:
        names = [b.name for b in backends]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"backend names must be unique; repeated: {', '.join(repeated)}")
        return backends

    def backend(self, name: str) -> BackendBaseline | None:
        return next((b for b in self.backends if b.name == name), None)

    @classmethod
    def parse(cls, document: object, where: str = "baseline") -> Baseline:
        """Validate a decoded document; a :class:`BaselineError` naming ``where`` if not."""
        if isinstance(document, Mapping) and "version" in document:
            version = document["version"]
            if version != 1:
                raise BaselineError(
                    f"{where}: unsupported version {version!r} (this gptgate reads version 1)"
                )
        try:
            return cls.model_validate(document)
        except ValidationError as error:
            raise BaselineError(f"{where}: not a valid baseline: {one_line(error)}") from None

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Baseline:
        """Read and validate a baseline file (a :class:`BaselineError` when it cannot be)."""
        where = os.fspath(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise BaselineError(f"{where}: no such file") from None
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else error
            raise BaselineError(f"{where}: cannot read it ({reason})") from None
        try:
            document: Any = json.loads(text)
        except ValueError as error:
            raise BaselineError(f"{where}: not JSON ({_first_line(error)})") from None
        return cls.parse(document, where)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the baseline as JSON, atomically (a crash mid-write leaves the old file)."""
        # keys in their own order: backends as configured, bands from light to heavy load
        save_state(path, self.model_dump(mode="json"), sort_keys=False)

    def age_s(self, now: datetime | None = None) -> float:
        """Seconds since it was made."""
        return ((now or datetime.now(UTC)) - self.created_at).total_seconds()


def _utc(value: datetime) -> datetime:
    """A timestamp without a zone is read as UTC (the file is written in UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _first_line(error: Exception) -> str:
    return re.sub(r"\s+", " ", str(error)).strip()
