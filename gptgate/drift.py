"""Drift: a backend that leaves its baseline for a sustained window.

``Gateway(baseline="baseline.json")`` compares what each backend does now with what it did when
``gptgate profile`` measured it, at the same load: every successful attempt lands in its
*concurrency band* (calls in flight at its admission, gptgate/baseline.py). Each band gathers
a step of live figures — p95 latency and TTFT (P² estimates, O(1) per call), decode speed
(output tokens/s), cache hit rate, each measured like the profile's whatever the workload
(gptgate/drift_measure.py) — and once the step has lasted ``step_s`` and holds
``min_samples`` calls it is judged against that band's baseline. A backend whose steps stay
out of band for ``window_s`` (on the gateway's clock) starts a drift *episode*: one warning
log, the ``gptgate.drift`` metric up, ``gate.stats()[name].drift`` says so. It ends once its
steps stay back in band for ``window_s``. A step needs calls to be judged: a backend with no
traffic keeps its state.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, model_validator

from .baseline import BackendBaseline, BandFigures, Baseline, BaselineError, band_of
from .cache import PrefixGroup
from .config import Backend
from .drift_measure import (
    CacheableCalls,
    comparable_prompt,
    decode_part,
    latency_at_profile_length,
)
from .limits.quantile import P2Quantile
from .telemetry import NAMES

__all__ = ["DriftMonitor", "DriftPolicy", "DriftStatus", "check_baseline_arg", "drift_monitors"]

log = logging.getLogger("gptgate")

#: the figures watched, as named in logs, ``DriftStatus.metrics`` and the metric's attribute
LATENCY_P95 = "latency_p95"
TTFT_P95 = "ttft_p95"
TOKENS_PER_S = "output_tokens_per_s"
HIT_RATE = "cache_hit_rate"

METRIC_NAME = "gptgate.drift"
BAND_ATTRIBUTE = "gptgate.drift.band"
METRIC_ATTRIBUTE = "gptgate.drift.metric"


class DriftPolicy(BaseModel):
    """When a live figure is out of its band. The defaults: p95 latency or TTFT above 1.5×
    the baseline's, decode speed (output tokens/s) below 0.75× it — a 1.5× slower backend is
    at 0.67×, a steady one stayed above 0.81× on the benchmark (benchmarks/drift.py) — cache
    hit rate more than 15 points under it; for 60 s in a row, judged in steps of 10 s with at
    least 20 calls each: an episode begins within ``window_s + 2 × step_s`` of a change."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    latency_p95_ratio: StrictFloat = Field(default=1.5, gt=1)
    ttft_p95_ratio: StrictFloat = Field(default=1.5, gt=1)
    tokens_per_s_ratio: StrictFloat = Field(default=0.75, gt=0, lt=1)
    #: absolute drop of the hit rate (0.15 = 15 points)
    hit_rate_drop: StrictFloat = Field(default=0.15, gt=0, le=1)
    #: how long out of band (or back in band) before an episode starts (or ends)
    window_s: StrictFloat = Field(default=60.0, gt=0)
    #: the length of one judged step; None → window_s / 6
    step_s: StrictFloat | None = Field(default=None, gt=0)
    #: calls a step needs before it is judged (fewer: it keeps gathering)
    min_samples: StrictInt = Field(default=20, ge=5)
    #: a baseline older than this is stale: not used (default 30 days)
    max_age_s: StrictFloat = Field(default=30 * 86_400.0, gt=0)

    @model_validator(mode="after")
    def _step_within_window(self) -> DriftPolicy:
        if self.step_s is not None and self.step_s > self.window_s:
            raise ValueError("step_s must be <= window_s")
        return self

    @property
    def step(self) -> float:
        return self.window_s / 6 if self.step_s is None else self.step_s


@dataclass(frozen=True, slots=True)
class DriftStatus:
    """One backend against its baseline (``gate.stats()[name].drift``).

    ``drifting`` while an episode lasts; ``metrics`` are the figures out of band at the last
    judged step (empty when it was in band), ``live`` and ``expected`` that step's figures and
    the baseline's (``expected`` is the edge of the band: 1.5 × the p95, …), ``band`` its
    concurrency band. ``since`` is when the episode began (gateway clock), ``episodes`` how many
    began so far."""

    drifting: bool
    band: str | None
    metrics: tuple[str, ...]
    since: float | None
    episodes: int
    live: Mapping[str, float] = field(default_factory=dict)
    expected: Mapping[str, float] = field(default_factory=dict)
    last_checked: float | None = None


class _Step:
    """The live figures of one band since its step began (all O(1) per call)."""

    __slots__ = (
        "cacheable_calls",
        "cacheable_tokens",
        "cached_tokens",
        "count",
        "decode_calls",
        "decode_s",
        "decode_tokens",
        "latency",
        "start",
        "ttft",
    )

    def __init__(self) -> None:
        self.start: float | None = None
        self.count = 0
        #: latency at the profile's answer length (gptgate/drift_measure.py)
        self.latency = P2Quantile(0.95)
        self.ttft = P2Quantile(0.95)
        self.decode_calls = 0
        self.decode_tokens = 0
        self.decode_s = 0.0
        #: calls that could have hit the prompt cache, their cacheable and cached tokens
        self.cacheable_calls = 0
        self.cacheable_tokens = 0
        self.cached_tokens = 0


@dataclass(frozen=True, slots=True)
class _Judgement:
    out: tuple[str, ...]
    live: dict[str, float]
    expected: dict[str, float]


def judge(
    figures: BandFigures,
    policy: DriftPolicy,
    *,
    latency_p95: float | None,
    ttft_p95: float | None,
    tokens_per_s: float | None,
    hit_rate: float | None,
) -> _Judgement:
    """Which live figures are out of the band around ``figures`` (those either side lacks
    are not judged)."""
    out: list[str] = []
    live: dict[str, float] = {}
    expected: dict[str, float] = {}
    if latency_p95 is not None:
        live[LATENCY_P95] = latency_p95
        expected[LATENCY_P95] = policy.latency_p95_ratio * figures.latency_p95_s
        if latency_p95 > expected[LATENCY_P95]:
            out.append(LATENCY_P95)
    if ttft_p95 is not None and figures.ttft_p95_s is not None:
        live[TTFT_P95] = ttft_p95
        expected[TTFT_P95] = policy.ttft_p95_ratio * figures.ttft_p95_s
        if ttft_p95 > expected[TTFT_P95]:
            out.append(TTFT_P95)
    # a baseline from before decode speed was recorded: its whole-call figure is lower than
    # the decode speed, so the comparison errs on the side of no alarm
    speed = figures.decode_tokens_per_s or figures.output_tokens_per_s
    if tokens_per_s is not None and speed is not None:
        live[TOKENS_PER_S] = tokens_per_s
        expected[TOKENS_PER_S] = policy.tokens_per_s_ratio * speed
        if tokens_per_s < expected[TOKENS_PER_S]:
            out.append(TOKENS_PER_S)
    if hit_rate is not None and figures.cache_hit_rate is not None:
        live[HIT_RATE] = hit_rate
        expected[HIT_RATE] = figures.cache_hit_rate - policy.hit_rate_drop
        if hit_rate < expected[HIT_RATE]:
            out.append(HIT_RATE)
    return _Judgement(tuple(out), live, expected)


class DriftMonitor:
    """One backend's drift watch. :meth:`observe` per successful attempt (O(1)); a step is
    judged when it is due, and episodes start and end there."""

    def __init__(
        self,
        backend: Backend,
        baseline: BackendBaseline,
        policy: DriftPolicy,
        *,
        instrument: Any = None,
    ) -> None:
        self.backend = backend
        self.baseline = baseline
        self.policy = policy
        self._step_s = policy.step
        self._steps = {band: _Step() for band in baseline.bands}
        self._cacheable = CacheableCalls()
        self._instrument = instrument
        #: start of the current run of out-of-band (resp. in-band) steps
        self._bad_since: float | None = None
        self._good_since: float | None = None
        self._episode_start: float | None = None
        #: (band, metric) pairs the metric was raised for in this episode
        self._raised: set[tuple[str, str]] = set()
        self._status = DriftStatus(drifting=False, band=None, metrics=(), since=None, episodes=0)

    @property
    def status(self) -> DriftStatus:
        return self._status

    def observe(
        self,
        now: float,
        inflight: int,
        latency_s: float,
        ttft_s: float | None,
        output_tokens: int,
        input_tokens: int | None = None,
        cached_tokens: int = 0,
        prefix: PrefixGroup | None = None,
    ) -> None:
        """One successful attempt: ``inflight`` calls were in flight at its admission (itself
        included); ``input_tokens`` None when the cached part is unknown (an estimate, an SDK
        response read by the tap), so that it does not read as a cache miss; ``prefix`` the
        call's prompt prefix (only a call whose prefix could be cached counts for the hit
        rate, gptgate/drift_measure.py)."""
        band = band_of(inflight)
        step = self._steps.get(band)
        if step is None:  # a band the baseline did not measure: nothing to compare with
            if input_tokens is not None:  # still, the prefix was served here
                self._cacheable.cacheable(
                    prefix, input_tokens, started=now - latency_s, ended=now
                )
            return
        if step.start is None:
            step.start = now
        elif now - step.start >= self._step_s and step.count >= self.policy.min_samples:
            # the step [start, now) is over: judge it, and this call opens the next one
            self._judge_step(band, step, now)
            step = self._steps[band]
            step.start = now
        figures = self.baseline.bands[band]
        step.count += 1
        if comparable_prompt(figures, input_tokens, cached_tokens):
            step.latency.add(latency_at_profile_length(figures, latency_s, output_tokens))
            if ttft_s is not None:
                step.ttft.add(ttft_s)
        decode = decode_part(
            latency_s, ttft_s if ttft_s is not None else figures.ttft_p50_s, output_tokens
        )
        if decode is not None:
            step.decode_calls += 1
            step.decode_tokens += decode.tokens
            step.decode_s += decode.seconds
        if input_tokens is not None:
            cacheable = self._cacheable.cacheable(
                prefix, input_tokens, started=now - latency_s, ended=now
            )
            if cacheable > 0:
                step.cacheable_calls += 1
                step.cacheable_tokens += cacheable
                step.cached_tokens += min(max(0, cached_tokens), cacheable)

    def _judge_step(self, band: str, step: _Step, now: float) -> None:
        start = step.start if step.start is not None else now
        self._steps[band] = _Step()
        minimum = self.policy.min_samples
        result = judge(
            self.baseline.bands[band],
            self.policy,
            latency_p95=step.latency.value if step.latency.count >= minimum else None,
            ttft_p95=step.ttft.value if step.ttft.count >= minimum else None,
            tokens_per_s=(
                step.decode_tokens / step.decode_s if step.decode_calls >= minimum else None
            ),
            hit_rate=(
                step.cached_tokens / step.cacheable_tokens
                if step.cacheable_calls >= minimum
                else None
            ),
        )
        drifting = self._episode_start is not None
        if result.out:
            self._good_since = None
            if self._bad_since is None:
                self._bad_since = start
            if not drifting and now - self._bad_since >= self.policy.window_s:
                self._begin(band, result, now)
            elif drifting:
                self._raise(band, result.out)
        else:
            self._bad_since = None
            if drifting:
                if self._good_since is None:
                    self._good_since = start
                if now - self._good_since >= self.policy.window_s:
                    self._end(band, now)
        self._status = DriftStatus(
            drifting=self._episode_start is not None,
            band=band,
            metrics=result.out,
            since=self._episode_start,
            episodes=self._status.episodes
            + (1 if not drifting and self._episode_start is not None else 0),
            live=result.live,
            expected=result.expected,
            last_checked=now,
        )

    def _begin(self, band: str, result: _Judgement, now: float) -> None:
        self._episode_start = self._bad_since
        self._raise(band, result.out)
        backend = self.backend
        details = "; ".join(_describe(m, result) for m in result.out)
        log.warning(
            "backend %r (%s) has drifted from its baseline for %.0f s in concurrency band %s: "
            "%s (gptgate.drift; see docs/drift.md)",
            backend.name, backend.hardware, now - (self._bad_since or now), band, details,
        )

    def _end(self, band: str, now: float) -> None:
        assert self._episode_start is not None
        log.info(
            "backend %r is back within its baseline (band %s) after a drift episode of %.0f s",
            self.backend.name, band, now - self._episode_start,
        )
        if self._instrument is not None:
            for raised_band, metric in sorted(self._raised):
                self._instrument.add(-1, self._attributes(raised_band, metric))
        self._raised.clear()
        self._episode_start = None
        self._good_since = None

    def _raise(self, band: str, out: Sequence[str]) -> None:
        """The metric goes up once per (band, figure) out of band during the episode."""
        for metric in out:
            if (band, metric) not in self._raised:
                self._raised.add((band, metric))
                if self._instrument is not None:
                    self._instrument.add(1, self._attributes(band, metric))

    def _attributes(self, band: str, metric: str) -> dict[str, str]:
        return {
            NAMES["backend"]: self.backend.name,
            NAMES["hardware"]: self.backend.hardware,
            BAND_ATTRIBUTE: band,
            METRIC_ATTRIBUTE: metric,
        }


def _describe(metric: str, result: _Judgement) -> str:
    live, edge = result.live[metric], result.expected[metric]
    if metric in (LATENCY_P95, TTFT_P95):
        return f"{metric} {live:.3g} s > {edge:.3g} s"
    if metric == TOKENS_PER_S:
        return f"{metric} {live:.3g} < {edge:.3g}"
    return f"{metric} {live:.0%} < {edge:.0%}"


BaselineSource = str | os.PathLike[str] | Baseline
#: a baseline dated this far in the future is as unusable as a stale one (a wrong clock)
_CLOCK_SKEW_S = 86_400.0


def check_baseline_arg(baseline: object) -> BaselineSource | None:
    """``baseline=`` is a path or a :class:`Baseline`; anything else fails at construction."""
    if baseline is None or isinstance(baseline, (str, os.PathLike, Baseline)):
        return baseline
    from .errors import BadRequestError

    raise BadRequestError(
        f"baseline must be a path (str or os.PathLike) or a gptgate.Baseline, "
        f"got {type(baseline).__name__}"
    )


def drift_monitors(
    source: BaselineSource,
    backends: Sequence[Backend],
    policy: DriftPolicy,
    *,
    meter_provider: metrics.MeterProvider | None = None,
) -> dict[str, DriftMonitor]:
    """A monitor per configured backend the baseline fits. Whatever cannot be used — no file,
    a bad one, a stale one, no entry for a backend, one for another model, base_url or
    hardware — is one log line and no drift checking there: never a failed start."""
    where = "baseline" if isinstance(source, Baseline) else f"baseline {os.fspath(source)}"
    if isinstance(source, Baseline):
        baseline = source
    else:
        try:
            baseline = Baseline.load(source)
        except BaselineError as error:
            log.warning("drift not checked: %s", error)
            return {}
    age = baseline.age_s()
    if not math.isfinite(age) or age > policy.max_age_s or age < -_CLOCK_SKEW_S:
        log.warning(
            "drift not checked: %s is stale (made %.1f days ago; max_age_s=%g)",
            where, age / 86_400, policy.max_age_s,
        )
        return {}
    meter = metrics.get_meter("gptgate", meter_provider=meter_provider)
    instrument = meter.create_up_down_counter(
        METRIC_NAME,
        unit="{metric}",
        description="Figures of a backend out of its baseline band in a drift episode "
        "(by backend, hardware, concurrency band and figure); 0 when within it",
    )
    monitors: dict[str, DriftMonitor] = {}
    for backend in backends:
        entry = baseline.backend(backend.name)
        if entry is None:
            log.warning("drift not checked for backend %r: %s has no entry for it",
                        backend.name, where)
            continue
        mine = (backend.model, backend.base_url, backend.hardware)
        theirs = (entry.model, entry.base_url.rstrip("/"), entry.hardware)
        if mine != theirs:
            log.warning(
                "drift not checked for backend %r: %s measured model %r at %s (%s), "
                "configured %r at %s (%s)",
                backend.name, where, *theirs, *mine,
            )
            continue
        if not entry.bands:
            log.warning("drift not checked for backend %r: %s has no bands for it",
                        backend.name, where)
            continue
        monitors[backend.name] = DriftMonitor(backend, entry, policy, instrument=instrument)
    return monitors
