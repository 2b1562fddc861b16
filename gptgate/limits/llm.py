"""``LLMLimit``: the default adaptive limit for LLM backends (``concurrency="auto"``).

Slow start, then extremum seeking on the goodput elasticity ``e = dlnX/dlnN`` around a centre
(the knee is where ``e`` falls to ``knee_elasticity``), with server-queue, delay and dense-loss
guards and a rate-limit ceiling. Names that matter: :class:`LLMLimit` (its constructor's knobs,
``limit``, ``center``, ``update``, ``set_window``, ``set_rate_ceiling``), ``trace`` (``(now,
limit)`` at every change, for benchmarks to plot), ``events`` (counts per cause) and
``rebases``. The derivation of every rule is in docs/adaptive.md, "How LLMLimit finds the knee".
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import NamedTuple

from .base import Sample
from .burst import STAIR_REFUTED, served_in_burst
from .doubling import doubling_queued, served_after_doubling
from .latency_bound import LatencyBound
from .normalise import LatencyNormaliser
from .overhead_fit import FIXED_PART_Z, LengthLine, fixed_part_exit, queued_by_fixed_part
from .rate_ceiling import ceiling_pace
from .refusal import centre_after_refusal

__all__ = ["LLMLimit"]


class _Window(NamedTuple):
    """A closed window: ``ln N``, latency ``R(K) = a + K·b`` and ``ln(1 − p)``."""

    ln_n: float
    a: float
    b: float
    ln_ok: float


class _Sums:
    """Running sums over a set of calls (a window, or the last few calls of it)."""

    __slots__ = (
        "a",
        "b",
        "hold",
        "inflight",
        "max_inflight",
        "n",
        "n_ttft",
        "ttft",
        "wait",
        "x",
        "x2",
    )

    def __init__(self) -> None:
        self.n = 0
        self.x = 0.0  # ln R, for the per-call variance
        self.x2 = 0.0
        self.inflight = 0
        self.max_inflight = 0
        self.a = 0.0
        self.b = 0.0
        self.wait = 0.0  # time permits were held before the send
        self.hold = 0.0  # time permits were held
        self.n_ttft = 0
        self.ttft = 0.0

    def add(
        self,
        inflight: int,
        x: float,
        a: float,
        b: float,
        wait: float,
        hold: float,
        ttft: float | None,
    ) -> None:
        self.n += 1
        self.x += x
        self.x2 += x * x
        self.inflight += inflight
        self.max_inflight = max(self.max_inflight, inflight)
        self.a += a
        self.b += b
        self.wait += wait
        self.hold += hold
        if ttft is not None:
            self.n_ttft += 1
            self.ttft += ttft


class _Warm:
    """The watch after a warm start (:meth:`LLMLimit.restore`): the first calls' latency
    against the saved baseline, in chunks of ``window_samples``, for about two latencies."""

    __slots__ = ("a", "b", "cold", "left", "n")

    def __init__(self, cold: float, left: int) -> None:
        self.cold = cold  # the cold ``initial``, where slow start starts again
        self.left = left  # successes still watched
        self.n = 0
        self.a = 0.0
        self.b = 0.0


#: what :meth:`LLMLimit.export_state` returns and :meth:`LLMLimit.restore` takes
STATE_KEYS = (
    "limit",
    "knee",
    "baseline_a",
    "baseline_b",
    "reference_tokens",
    "overhead_tokens",
    "log_var",
    "rtt_s",
    "latency_s",
    "r_mean_s",
)


class LLMLimit:
    """Slow start + goodput elasticity + server queue + delay + dense loss: see the module."""

    #: set by :meth:`restore` until the first calls confirm the saved state (warm start)
    _warm: _Warm | None = None

    def __init__(
        self,
        initial: int = 4,
        min_limit: int = 1,
        max_limit: int = 64,
        *,
        window_samples: int = 16,
        window_fraction: float = 0.5,
        max_window_samples: int = 256,
        max_window_latencies: float = 4.0,
        window_error: float = 0.03,
        knee_elasticity: float = 0.15,
        slow_start_exit: float = 0.3,
        probe: float = 0.08,
        gain: float = 0.3,
        deadband: float = 1.75,
        evidence_horizon: int = 32,
        guard_z: float = 3.0,
        doubling_z: float = math.inf,
        rate_headroom: float = 2.0,
        min_gain: float = 0.05,
        backoff_ratio: float = 0.8,
        loss_tolerance: float = 0.1,
        tolerance: float = 1.5,
        queue_tolerance: float = 0.1,
        timeout_s: float | None = None,
        latency_bound_s: float | None = None,
        overhead_tokens: float = 20.0,
        trace_size: int = 10_000,
    ) -> None:
        if not 1 <= min_limit <= max_limit:
            raise ValueError("need 1 <= min_limit <= max_limit")
        if window_samples < 2:
            raise ValueError("window_samples must be >= 2")
        if not 0.0 < backoff_ratio < 1.0:
            raise ValueError("backoff_ratio must be in (0, 1)")
        if not 0.0 < probe < 1.0:
            raise ValueError("probe must be in (0, 1)")
        if tolerance <= 1.0:
            raise ValueError("tolerance must be > 1")
        self.min_limit = min_limit
        self.max_limit = max_limit
        self.window_samples = window_samples
        self.window_fraction = window_fraction
        self.max_window_samples = max(window_samples, max_window_samples)
        self.max_window_latencies = max_window_latencies
        self.window_error = window_error
        self.knee_elasticity = knee_elasticity
        self.slow_start_exit = slow_start_exit
        self.probe = probe
        self.gain = gain
        self.deadband = deadband
        self.evidence_horizon = max(1, evidence_horizon)
        self.guard_z = guard_z
        #: slow start's mid-window exit on a doubling into a queue (gptgate/limits/doubling.py)
        #: fires beyond this many standard errors; ``math.inf`` (the default) keeps it off:
        #: at 2 it holds the plateau's edge (docs/adaptive.md, "At a plateau's edge") but cost
        #: one false attempt timeout in a 400-call gpu burst and a family draw with stragglers
        self.doubling_z = doubling_z
        self.rate_headroom = rate_headroom
        self.min_gain = min(min_gain, gain)
        self.backoff_ratio = backoff_ratio
        self.loss_tolerance = loss_tolerance
        self.tolerance = tolerance
        self.queue_tolerance = queue_tolerance
        self.timeout_s = timeout_s
        #: the attempt bound (the backend's ``timeout``): the limit keeps its calls inside it
        #: (gptgate/limits/latency_bound.py)
        self._bound = LatencyBound(latency_bound_s)
        #: ``(now, limit)`` at every change
        self.trace: deque[tuple[float, int]] = deque(maxlen=trace_size)
        #: why the limit moved: counts per cause
        self.events = {"slow_start_exit": 0, "loss": 0, "queue": 0, "delay": 0}
        #: latency jumps that only rebased the baseline (at the rate limit): no move, no cause
        self.rebases = 0
        self._norm = LatencyNormaliser(overhead_tokens)
        self._low = min_limit
        self._high = max_limit
        self._rate: float | None = None  # calls/s a rate limit sustains (set_rate_ceiling)
        self._budget: float | None = None  # calls its budget funds now (set_rate_budget)
        self._funds = 0.0  # calls the budget funds now, whatever the demand
        self._demand = 0  # calls waiting or in flight at the last budget report
        self._job: int | None = None  # and all the calls left of the work, when known
        self._lift = 0.0  # the ceiling a budget spilling its refill lifted it to
        self._center = float(self._clamp(initial))
        self._limit = self._clamp(initial)
        self._slow_start = True
        self._pinned = False  # the centre wants to be above the rate ceiling: follows it up
        self._probe_high = False
        self._window_start = -math.inf  # calls admitted earlier are not measured
        self._guard_from = -math.inf  # nor watched by the guards (admitted before a cut)
        self._last_cut = -math.inf  # calls admitted earlier cannot cut again
        self._hist: deque[_Window] = deque(maxlen=2)
        self._base: tuple[float, float] | None = None  # baseline (a, b), EWMA over windows
        self._r_mean = 0.0  # EWMA of per-call R, for winsorising
        self._log_var = 0.0  # EWMA over windows of the per-call variance of ln R
        self._ttft_floor: float | None = None
        self._rtt = 0.0  # EWMA of raw latency: how long a step down takes to drain
        self._latency = 0.0  # a slower EWMA of it, for the rate ceiling
        self._ok = 0  # successes since the last window closed, and when the first came
        self._ok_first = 0.0
        self._throughput = 0.0
        self._elasticity = math.nan
        self._step = gain  # Rprop-style step: smaller while oscillating around the knee
        self._last_err = 0.0
        self._evidence = 0.0  # mean error of the last estimates (up to ``evidence_horizon``)
        self._evidence_n = 0
        self._w: _Sums
        self._c: _Sums
        self._line = LengthLine()  # the open window's non-streamed calls: latency on length
        self._line_before = LengthLine()  # slow start's windows before the open one
        self._refused: float
        self._reset_window()
        # the first burst, admitted before any answer came back: (rank, a, b) per call (its
        # in-flight count at admission is its rank)
        self._burst: list[tuple[int, float, float]] | None = []
        self._burst_until = math.inf  # when its first answer came back
        self._burst_level = self._limit  # the limit it was admitted at
        self._burst_began = math.inf  # when its first call was admitted
        self._stair: float | None = None  # ln of its goodput, when it read as a stair

    # ---- public surface -----------------------------------------------------------------
    @property
    def limit(self) -> int:
        return self._limit

    @property
    def center(self) -> float:
        """The operating point the limit probes around (after slow start)."""
        return self._center

    @property
    def in_slow_start(self) -> bool:
        return self._slow_start

    @property
    def throughput(self) -> float:
        """Successful calls per second over the last complete window (0 before one)."""
        return self._throughput

    @property
    def elasticity(self) -> float:
        """The last measured ``dlnX/dlnN`` (NaN before the first measurement)."""
        return self._elasticity

    @property
    def window(self) -> tuple[int, int]:
        """The bounds in force: ``[min_limit, max_limit]`` narrowed by :meth:`set_window`."""
        return self._low, self._high

    def set_window(self, low: int | None, high: int | None = None) -> None:
        """Clamp the limit to a scenario's concurrency window, e.g. ``(20, 30)``.

        ``None`` on a side means the limit's own bound; ``set_window(None)`` clears it. The
        centre is clamped too (no wind-up beyond a window the caller will lift later).
        """
        lo = self.min_limit if low is None else min(max(self.min_limit, low), self.max_limit)
        hi = self.max_limit if high is None else max(min(self.max_limit, high), self.min_limit)
        if lo > hi:
            raise ValueError("window low must be <= high")
        self._low, self._high = lo, hi
        self._pinned = False  # a window lifted later must not carry the centre up with it
        self._center = min(max(self._center, float(lo)), float(hi))
        limit = self._clamp(self._limit)
        if limit != self._limit:
            self._limit = limit
            if self.trace:
                self.trace.append((self.trace[-1][0], limit))

    def set_rate_ceiling(self, calls_per_s: float | None) -> None:
        """The calls per second a rate limit (RPM/TPM) sustains; ``None`` when there is none.

        More than ``rate_headroom × rate × latency`` calls in flight cannot raise goodput (by
        Little's law they only wait for the pacer), so the limit stays below that ceiling.
        """
        self._rate = calls_per_s if calls_per_s is not None and calls_per_s > 0.0 else None

    @property
    def rate_latency_s(self) -> float:
        """The latency the rate ceiling is sized by (a slow EWMA of the calls'), the horizon
        to ask the pacer how much refill a full budget would lose (``spilled=``)."""
        return self._latency

    def set_rate_budget(
        self,
        calls: float | None,
        *,
        demand: int = 0,
        spilled: float = 0.0,
        ahead: int | None = None,
    ) -> None:
        """How many calls the rate budget (RPM/TPM bucket) funds right now (``None`` when
        unknown), and ``demand``, the calls waiting or in flight.

        A bucket starts full (a minute's budget), and while it lasts the pacer sends every
        call at once: capping the limit at the sustained rate then only left the server idle —
        a 400-call job on a 200-slot server under a 2.7M TPM limit ran at 36% of a fixed
        limit of 100's goodput, the whole job inside the first minute's budget. So while the
        budget funds at least twice the demand, the ceiling is what it funds. Not otherwise:
        a job the budget does not cover ends at the sustained rate whatever the limit, and a
        burst above the sustained ceiling only queues at a batching server (tier1, 1,000 calls
        under 300 RPM: p99 1.30× fixed 20's, against 0.99× capped). Twice, because the
        gateway sees the work queued for a permit (``gate.map`` feeds 256 at a time), not the
        job's whole length.

        ``spilled``: the calls' worth of refill the budget would lose over the next latency
        if no more were sent (:meth:`RateLimitPacer.spilled_calls`). While it is above 0 the
        bucket sits full and the sustained ceiling only wastes it (issue 31, draws 77 and
        1079: the bucket full for the first ~110 calls, ~20 calls of refill lost), so the
        ceiling is lifted to the limit plus that spill, and stays below what the budget funds
        over one latency (``calls + rate × latency``): it follows the budget down as the
        lifted limit spends it. Only by the spill: each call the lift sends takes one from the
        bucket and one from the spill, so the lift stops where the sends reach the refill —
        lifted whole while the budget was merely full, slow start's burst spent it and left a
        job's tail at the sustained rate (draw 83: 72.7% → 53.6% of fixed 64's goodput).

        ``ahead``: the calls still to come beyond ``demand`` when that is known (``gate.map``
        over a sized iterable, gptgate/map_demand.py), else None: with the job's length
        known, whether the bucket outlasts it is known too, not guessed from the share of it
        in sight (:func:`~gptgate.limits.rate_ceiling.ceiling_pace`)."""
        funds = calls is not None and calls >= 2.0 * max(0, demand)
        lifted = self._budget is not None or self._lift > 0.0
        self._budget = calls if funds else None
        self._funds = calls if calls is not None else 0.0
        self._demand = demand
        self._job = None if ahead is None else max(0, demand) + max(0, ahead)
        if spilled > 0.0:
            self._lift = max(self._lift, self._limit + spilled)
        elif self._rate is None or self._funds < self._rate * self._latency:
            self._lift = 0.0  # spent: a bucket full again later lifts from the limit then
        if not lifted:
            return
        # follow a budget running out at once, not at the next window: calls admitted past
        # what it funds would wait for the pacer holding their permits (tier1: p99 1.54×
        # fixed 20's and 429s at the budget's end when the limit came down a window late)
        limit = self._clamp(self._limit)
        if limit < self._limit:
            self._limit = limit
            if self.trace:
                self.trace.append((self.trace[-1][0], limit))

    @property
    def _rate_bound(self) -> bool:
        """Whether the rate ceiling, rather than a fixed bound, is the one in force."""
        return self._rate_ceiling < self._high

    @property
    def ceiling(self) -> int:
        """The highest limit in force: the window's high bound, or the rate ceiling or the
        latency bound's (calls kept inside their timeout) if lower."""
        bound = self._bound.ceiling()
        rate = self._rate_ceiling
        return rate if bound >= rate else max(self._low, int(bound))

    @property
    def _rate_ceiling(self) -> int:
        high = self._high
        if self._rate is not None and self._latency > 0.0:
            pace = ceiling_pace(self._rate, self._funds, self._demand, self._job)
            sustained = self.rate_headroom * pace * self._latency
            # while the budget funds more calls than that, the pacer does not hold them back
            funded = self._budget if self._budget is not None else 0.0
            spilling = min(self._lift, self._funds + self._rate * self._latency)
            high = min(high, math.ceil(max(sustained, funded, spilling)))
        return max(self._low, high)

    @property
    def _rate_limited(self) -> bool:
        """Whether a known rate limit, not the server, bounds the goodput now: a rate is
        known and its budget is spent down to the sustained ceiling (or is not reported)."""
        if self._rate is None:
            return False
        if self._budget is None:
            return True
        return self._budget <= self.rate_headroom * self._rate * max(self._latency, 0.0)

    def update(self, sample: Sample, now: float) -> None:
        if sample.kind == "ignored":
            return
        if not self.trace:
            self.trace.append((now, self._limit))
        if sample.start >= self._window_start:
            self._bound.add(sample.latency_s)
        if sample.kind == "dropped" or (
            self.timeout_s is not None and sample.latency_s > self.timeout_s
        ):
            self._on_drop(sample, now)
            return
        if self._ok == 0:
            self._ok_first = now
        self._ok += 1
        if sample.start > self._last_cut:
            self._loss_ok += 1
        self._rtt += (sample.latency_s - self._rtt) * (0.1 if self._rtt else 1.0)
        self._latency += (sample.latency_s - self._latency) * (0.02 if self._latency else 1.0)
        a, b = self._norm.split(sample)
        # Little's law counts a call in flight for as long as it holds its permit; time held
        # before the send (e.g. waiting for the rate-limit pacer) is part of its latency —
        # unless the rate limit is known: then its ceiling bounds the limit, and the server
        # behind it is measured on its own
        wait = max(0.0, (now - sample.start) - sample.latency_s) if self._rate is None else 0.0
        a += wait
        if self._warm is not None and self._warm_watch(a, b, now):
            return  # the backend changed since the snapshot: back to slow start
        r = a + self._norm.reference_tokens * b
        if self._r_mean > 0.0 and r > 5.0 * self._r_mean:
            a, b = a * 5.0 * self._r_mean / r, b * 5.0 * self._r_mean / r
            r = 5.0 * self._r_mean
        self._r_mean += (r - self._r_mean) * (0.05 if self._r_mean > 0.0 else 1.0)
        hold = wait + max(0.0, sample.latency_s)
        ttft = sample.ttft_s
        if ttft is not None and not 0.0 <= ttft <= sample.latency_s:
            ttft = None
        x = math.log(max(r, 1e-12))
        if self._burst is not None and self._burst_queued(sample, a, b, now):
            return
        if sample.start >= self._window_start:
            self._w.add(sample.inflight, x, a, b, wait, hold, ttft)
            if ttft is None:
                self._line.add(max(0, sample.output_tokens), sample.latency_s)
            if self._stair is not None and self._stair_refuted(now):
                return
            if self._w.n >= self._window_size():
                self._close_window(now)
                return
            if self._slow_start and self._doubling_queued(now):
                return
        if self._slow_start or sample.start < self._guard_from:
            return
        # the guards also watch the latest calls alone, every ``window_samples``: a capacity
        # drop shows in them long before it moves the mean of a long window. They include
        # calls admitted before a probing step (±8% does not make a 1.5× jump), but not those
        # from before the last cut (the same overload)
        self._c.add(sample.inflight, x, a, b, wait, hold, ttft)
        if self._c.n >= self.window_samples:
            chunk, self._c = self._c, _Sums()
            self._guards(now, chunk, final=False)

    # ---- warm start (gate.snapshot / Gateway(state=...)) ---------------------------------
    def export_state(self) -> dict[str, float] | None:
        """What a warm start needs (see :meth:`restore`); ``None`` while nothing is learned
        yet (in slow start, or no latency baseline)."""
        if self._slow_start or self._base is None:
            return None
        return {
            "limit": float(self._limit),
            "knee": self._center,
            "baseline_a": self._base[0],
            "baseline_b": self._base[1],
            "reference_tokens": self._norm.reference_tokens,
            "overhead_tokens": self._norm.overhead_tokens,
            "log_var": self._log_var,
            "rtt_s": self._rtt,
            "latency_s": self._latency,
            "r_mean_s": self._r_mean,
        }

    def restore(self, state: Mapping[str, float]) -> None:
        """Start probing around a saved knee instead of slow start from ``initial``.

        The first calls are watched: a congestion drop, or a chunk of ``window_samples``
        calls whose mean latency is ≥ 2× the saved baseline, means the backend changed — the
        state is dropped and slow start begins from ``initial`` as on a cold start.
        """
        missing = [key for key in STATE_KEYS if key not in state]
        if missing:
            raise ValueError(f"state lacks {', '.join(missing)}")
        values = {key: float(state[key]) for key in STATE_KEYS}
        if not all(math.isfinite(v) for v in values.values()) or values["knee"] < 1.0:
            raise ValueError("state values must be finite, with knee >= 1")
        cold = self._center
        self._slow_start = False
        self._base = (values["baseline_a"], values["baseline_b"])
        self._norm._n_ref = max(1.0, values["reference_tokens"])
        self._norm._count = self._norm._horizon  # an EWMA from here on, not a fresh mean
        self._norm._overhead = max(0.0, values["overhead_tokens"])
        self._log_var = max(0.0, values["log_var"])
        self._rtt = max(0.0, values["rtt_s"])
        self._latency = max(0.0, values["latency_s"])
        self._r_mean = max(0.0, values["r_mean_s"])
        self._center = values["knee"]
        self._hist.clear()
        self._probe_high = False
        self._apply(-math.inf, down=True)  # the low probe first: the cautious side
        self._window_start = -math.inf
        self.trace.clear()  # the first sample stamps the restored limit with its time
        self._warm = _Warm(cold, max(2 * self.window_samples, 2 * self._limit))

    @property
    def warm(self) -> bool:
        """Whether the limit is still checking a restored state against the backend."""
        return self._warm is not None

    def _warm_watch(self, a: float, b: float, now: float) -> bool:
        """One success after a warm start; True when it fell back to slow start."""
        warm = self._warm
        assert warm is not None and self._base is not None
        warm.n += 1
        warm.a += a
        warm.b += b
        warm.left -= 1
        if warm.n >= self.window_samples:
            excess = self._ln_r(warm.a / warm.n, warm.b / warm.n) - self._ln_r(*self._base)
            if excess >= math.log(2.0):
                self._warm_fallback(now)
                return True
            warm.n, warm.a, warm.b = 0, 0.0, 0.0
        if warm.left <= 0:
            self._warm = None  # confirmed: from here on the usual guards watch
        return False

    def _warm_fallback(self, now: float) -> None:
        """The saved state does not fit this backend: forget it and slow-start cold."""
        warm, self._warm = self._warm, None
        assert warm is not None
        self.events["warm_fallback"] = self.events.get("warm_fallback", 0) + 1
        self._slow_start = True
        self._base = None
        self._log_var = 0.0
        self._r_mean = 0.0
        self._center = warm.cold
        self._last_cut = now  # calls admitted at the saved level cannot cut again
        self._restart(now)

    # ---- the decisions ------------------------------------------------------------------
    def _on_drop(self, sample: Sample, now: float) -> None:
        if sample.start <= self._last_cut:
            # the same overload event as the last cut — a call admitted at the very instant of
            # the cut was admitted before it (a refusal answers at once: on a bounded queue a
            # doubling's burst of 503s, all admitted and refused at one instant, used to cut
            # 64 → 29 → 21 → … → 4 in one go, and probing took the rest of the run to climb back)
            return
        if sample.start >= self._window_start:
            self._drops += 1  # lowers this window's goodput
        if not sample.congestion:
            # a server failure: it lowers goodput (so a failure rate that grows with the load
            # moves the knee down) but alone is no reason to cut — some backends fail a share
            # of calls at any load
            return
        if sample.rate_limited and 2 * sample.inflight < self._limit:
            # a 429 while the calls did not fill the limit (one call at a time, retrying):
            # the rate budget is spent, which the pause and the pacer handle; it says nothing
            # of how many calls at once the backend serves. Two sequential calls meeting 429s
            # used to cut 4 → 1, and probing took minutes to climb back
            return
        if self._warm is not None:
            self._warm_fallback(now)  # overload right after a warm start: the backend changed
            return
        # the density check sees every call admitted since the cut, settling or not: a
        # rejection storm is fastest exactly while the window is still settling
        self._loss_drops += 1
        if sample.kind == "dropped" and sample.latency_s <= 0.25 * self._rtt:
            # refused at once (not a timeout): the server's capacity ends below this rank
            self._refused = min(self._refused, sample.inflight)
        if self._loss_drops < 2 or self._loss_drops < self.loss_tolerance * (
            self._loss_ok + self._loss_drops
        ):
            return  # a stray failure
        self._last_cut = now
        self.events["loss"] += 1
        if self._slow_start:
            self._slow_start = False
            # a doubling's burst refused from the server's capacity on: just below it (the
            # level before the doubling when none was refused at once — timeouts)
            edge = centre_after_refusal(self._limit, self._refused, probe=self.probe)
            self._center = max(1.0, edge)
        else:
            self._center = self._limit * self.backoff_ratio
        self._restart(now)

    def _close_window(self, now: float) -> None:
        n = self._w.n
        if n > 1:
            var = max(0.0, (self._w.x2 - self._w.x**2 / n) / (n - 1))
            self._log_var += (var - self._log_var) * (0.3 if self._log_var else 1.0)
        n_mean = self._n_mean(self._w)
        self._bound.close(n_mean)
        app_limited = 2.0 * n_mean < self._limit
        window = _Window(
            math.log(n_mean),
            self._w.a / n,
            self._w.b / n,
            math.log(n / (n + self._drops)),
        )
        if self._ok > 1 and now > self._ok_first:
            self._throughput = (self._ok - 1) / (now - self._ok_first)
        self._ok = 0
        self._burst = None  # slow start's first window closed: it decides from here
        if self._slow_start and self._rate is not None:
            # the ceiling's latency is at least this level's (no pacer wait is in ``hold``
            # with a known rate): the first, unloaded calls' alone ended slow start far below
            self._latency = max(self._latency, self._w.hold / n)
        if self._slow_start:
            queued = self._queued(self._w, n_mean, final=True)
            waited = self._fixed_part_queued(n_mean)
            if self._hist and queued > self.queue_tolerance * n_mean:
                # a queue formed (at the server, or before the send): the doubling overshot
                self.events["queue"] += 1
                self._slow_start = False
                self._center = max(1.0, n_mean - queued) * (1.0 + self.queue_tolerance)
                self._base = (window.a, window.b)
                self._restart(now)
            elif self._hist and fixed_part_exit(
                waited / n_mean, self._doubling_elasticity(window), tolerance=self.queue_tolerance
            ):
                self._fixed_part_exit(now, window)
            else:
                self._slow_start_window(now, window, app_limited)
        elif not self._guards(now, self._w, final=True):
            self._probe_window(now, window, app_limited)

    def _doubling_elasticity(self, window: _Window) -> float:
        """Slow start's ``e`` over the last doubling (infinite when ``N`` hardly grew)."""
        prev = self._hist[-1]
        d_ln_n = window.ln_n - prev.ln_n
        if d_ln_n < 0.1:
            return math.inf
        return (self._ln_x(window) - self._ln_x(prev)) / d_ln_n

    def _fixed_part_exit(self, now: float, window: _Window) -> None:
        """Slow start ends on a doubling whose calls queued at the server: the level before
        served all it was given (no queue showed there), so the centre is that level on
        probing's low side (``N_prev / (1 − probe)``: probing it and one call above), and
        probing climbs from there if the goodput does."""
        prev = self._hist[-1]
        self.events["queue"] += 1
        self._slow_start = False
        self._center = min(math.exp(prev.ln_n) / (1.0 - self.probe), math.exp(window.ln_n))
        self._base = self._blend((prev.a, prev.b), (window.a, window.b), 0.5)
        self._restart(now)

    def _fixed_part_queued(self, n_mean: float) -> float:
        """Slow start: the calls a doubling queued at the server, from the rise of the
        non-streamed calls' fixed part over the window before (gptgate/limits/overhead_fit.py)
        — the queue a streamed call shows in its time to first token."""
        line = self._line
        if not self._hist:
            self._line_before = LengthLine()  # slow start's first window (or again)
        before, after = self._line_before.fixed_part(), line.fixed_part()
        self._line_before.merge(line)
        if before is None or after is None:
            return 0.0
        return queued_by_fixed_part(before, after, n_mean, line.y / line.k, z=FIXED_PART_Z)

    def _guards(self, now: float, sums: _Sums, *, final: bool) -> bool:
        """The server-queue and delay checks; True when one cut the limit.

        Also run on every ``window_samples`` calls, so that a capacity
        drop is answered within a few dozen calls even when noise makes the probing windows
        long; there they fire only on an excess beyond ``guard_z`` standard errors.
        """
        n_mean = self._n_mean(sums)
        # on a few calls, only an excess beyond ``guard_z`` standard errors counts
        se = 0.0 if final else self.guard_z * math.sqrt(self._log_var / sums.n)
        queued = self._queued(sums, n_mean, final=final)
        if queued > (self.queue_tolerance + se) * n_mean:
            # calls wait at the server: they add latency and no throughput
            self.events["queue"] += 1
            served = max(1.0, n_mean - queued)
            self._center = min(self._center, served * (1.0 + self.queue_tolerance))
            self._restart(now)
            return True
        if self._base is None:
            return False
        a, b = sums.a / sums.n, sums.b / sums.n
        excess = self._ln_r(a, b) - self._ln_r(*self._base)
        if excess > math.log(self.tolerance) + se:
            # latency jumped above its baseline: goodput × baseline latency (Vegas, BBR), at
            # most halving per event (Gradient2's floor): part of a jump may be a slower
            # backend rather than a queue
            cut = n_mean * max(0.5, math.exp(-excess))
            if self._rate is not None and self._rate_limited and (
                self._throughput >= 0.9 * self._rate or (self._pinned and self._rate_bound)
            ):
                # goodput is at the rate limit, or the centre is held at the rate ceiling (the
                # slowdown itself lowers the goodput last measured): the pacer, not this limit,
                # bounds the load on the server, so the jump is the server slowing at a load it
                # sustains rather than a queue we cause. A cut would only leave the budget
                # unused: rebase the baseline and keep the centre (the rate ceiling follows
                # the new latency). Cutting there cost tier1 ~400 calls to climb back
                cut = max(cut, self._center)
            self._base = self._blend(self._base, (a, b), 0.5)
            if cut >= self._center:
                # a baseline-only event: nothing is cut, so probing goes on where it was (its
                # windows, step and side kept). Restarting here set back tier1's climb to its
                # rate ceiling at every such event (settle 388 calls, pooled, at 3,000)
                self.rebases += 1
                # but the windows measured before the jump priced the old server: set beside
                # the next they read the slowdown as a negative elasticity and cut anyway
                self._hist.clear()
                if final:
                    # this window spans the jump: measure the same probe again, not it
                    self._reset_window()
                    self._window_start = now
                    return True
                return False
            self.events["delay"] += 1
            self._center = cut
            self._restart(now)
            return True
        return False

    def _burst_queued(self, sample: Sample, a: float, b: float, now: float) -> bool:
        """A success while slow start's first burst is out: True when the burst's answers so
        far climb in a stair by admission order (gptgate/limits/burst.py) — the server serves
        fewer calls than ``initial``. Slow start ends at those, with their latency, unqueued,
        as the baseline (so the delay guard sees a queue above it) until the first window
        there refutes it; decided at the answer that shows it, not at the window's end, while
        the calls refilled meanwhile still queue."""
        burst = self._burst
        assert burst is not None
        self._burst_until = min(self._burst_until, now)
        if not self._slow_start or self._hist or sample.start >= self._burst_until:
            return False
        burst.append((sample.inflight, a, b))
        self._burst_began = min(self._burst_began, sample.start)
        self._burst_level = self._limit
        # priced at one answer length, the current one (it is learnt from these very calls)
        k = self._norm.reference_tokens
        served = served_in_burst(
            [(rank, fixed + k * per_token) for rank, fixed, per_token in burst]
        )
        if served is None:
            return False
        self._burst = None
        self.events["queue"] += 1
        self._slow_start = False
        self._center = served * (1.0 + self.queue_tolerance)
        first = sorted(burst)[:served]
        self._base = (
            sum(call[1] for call in first) / served,
            sum(call[2] for call in first) / served,
        )
        # the burst's goodput: its answers so far over the time since it was admitted
        began = min(self._burst_began, now - 1e-9)
        self._stair = math.log(len(burst) / (now - began))
        self._restart(now)
        return True

    def _stair_refuted(self, now: float) -> bool:
        """The first calls at the level the burst's stair said the server serves: True when
        their goodput is below the burst's (``STAIR_REFUTED``) — the stair was the server at
        that load only (a router sending the whole burst to one replica of several), not its
        slots. Then slow start resumes at the burst's level. Family draw 68 (five replicas of
        two slots) read one served, and probing took the whole run to climb back (27% of fixed
        32's goodput).
        Judged on the first ``window_samples / 2`` calls there: fewer still queue behind the
        burst's (1-slot draw 69: 2.1× on four, 1.3× on eight; draw 68 2.1×)."""
        w = self._w
        if w.n < max(2, self.window_samples // 2):
            return False
        stair, self._stair = self._stair, None
        assert stair is not None
        ln_x = math.log(self._n_mean(w)) - self._ln_r(w.a / w.n, w.b / w.n)
        if stair - ln_x <= math.log(STAIR_REFUTED):
            return False
        self._slow_start = True
        self._base = None
        self._center = float(self._burst_level)
        self._restart(now)
        return True

    def _doubling_queued(self, now: float) -> bool:
        """Slow start, mid-window: True when the calls admitted since the last doubling
        already show it ran into a server queue (their latency grew with the doubling, their
        goodput did not) — then slow start ends at the calls actually served. Waiting for the
        window to close admitted two to three times as many calls into that queue."""
        w = self._w
        if math.isinf(self.doubling_z):
            return False  # off (the default)
        if not self._hist or w.n < max(2, self.window_samples // 4) or self._log_var <= 0.0:
            return False
        prev = self._hist[-1]
        n_mean = self._n_mean(w)
        d_ln_n = math.log(n_mean) - prev.ln_n
        excess = self._ln_r(w.a / w.n, w.b / w.n) - self._ln_r(prev.a, prev.b)
        se = math.sqrt(self._log_var / w.n)
        if d_ln_n < 0.1 or not doubling_queued(
            d_ln_n, excess, se, exit_elasticity=self.slow_start_exit, z=self.doubling_z
        ):
            return False
        self.events["slow_start_exit"] += 1
        self._elasticity = 1.0 - excess / d_ln_n
        self._slow_start = False
        self._center = served_after_doubling(
            n_mean,
            math.exp(prev.ln_n),
            excess,
            queue_tolerance=self.queue_tolerance,
            probe=self.probe,
        )
        self._base = self._blend((prev.a, prev.b), (w.a / w.n, w.b / w.n), 0.5)
        self._restart(now)
        return True

    def _slow_start_window(self, now: float, window: _Window, app_limited: bool) -> None:
        hist = self._hist
        if hist and window.ln_n - hist[-1].ln_n >= 0.1:
            prev = hist[-1]
            gained = self._ln_x(window) - self._ln_x(prev)
            self._elasticity = gained / (window.ln_n - prev.ln_n)
            # server failures (not a reason to cut by themselves) that turned dense with this
            # doubling: it bought failures, and the next one would buy more. A backend that
            # fails as often at the level before (at any load) does not stop slow start
            failed = 1.0 - math.exp(window.ln_ok)
            failing = (
                self._drops >= 2
                and failed >= self.loss_tolerance
                and failed - (1.0 - math.exp(prev.ln_ok)) >= 0.5 * self.loss_tolerance
            )
            if self._elasticity < self.slow_start_exit or failing:
                self.events["slow_start_exit"] += 1
                self._slow_start = False
                # linear-scaling equivalent of the goodput the last doubling bought
                target = math.exp(prev.ln_n + gained)
                self._center = min(max(target, math.exp(prev.ln_n)), math.exp(window.ln_n))
                self._base = self._blend((prev.a, prev.b), (window.a, window.b), 0.5)
                self._restart(now)
                return
        if not app_limited:
            if self._limit >= self.ceiling:
                # nothing left to double into: probe downwards from the ceiling instead
                self.events["slow_start_exit"] += 1
                self._slow_start = False
                self._center = float(self.ceiling)
                self._base = (window.a, window.b)
                self._restart(now, pinned=self._rate_bound)
                return
            self._center *= 2.0
        hist.append(window)
        self._apply(now, down=False)

    def _probe_window(self, now: float, window: _Window, app_limited: bool) -> None:
        hist = self._hist
        if len(hist) == 2:
            w1, w2 = hist
            x1, x2, x3 = self._ln_x(w1), self._ln_x(w2), self._ln_x(window)
            d_ln_n = w2.ln_n - 0.5 * (w1.ln_n + window.ln_n)
            if abs(d_ln_n) >= 0.5 * self.probe:
                # centred difference around the middle window: cancels a linear drift
                e = (x2 - 0.5 * (x1 + x3)) / d_ln_n
                # a step change in one window makes the one-sided estimates disagree: then
                # trust the more cautious one
                d1, d2 = w2.ln_n - w1.ln_n, window.ln_n - w2.ln_n
                if abs(d1) > 0.05 and abs(d2) > 0.05:
                    e_before, e_after = (x2 - x1) / d1, (x3 - x2) / d2
                    if abs(e_before - e_after) > 1.0:
                        e = min(e_before, e_after)
                self._elasticity = e
                err = e - self.knee_elasticity
                # only the part of the error beyond its noise moves the centre (soft threshold
                # at ``deadband`` standard errors of the centred difference): at the knee the
                # estimate's noise alone would make the centre random-walk
                se = math.sqrt(1.5 * self._log_var / self._w.n) / abs(d_ln_n)
                self._evidence_n = min(self._evidence_n + 1, self.evidence_horizon)
                self._evidence += (max(-1.0, min(1.0, err)) - self._evidence) / self._evidence_n
                err = math.copysign(max(0.0, abs(err) - self.deadband * se), err)
                if err == 0.0 and self._evidence_n >= 3:
                    # inside one estimate's dead band, the mean of the last ones may not be:
                    # on a flat plateau (e = 0, only 0.15 below the knee) a noisy backend kept
                    # the centre wherever slow start left it, mid-plateau, paying queueing for
                    # no goodput. k estimates over alternating probes average like ~3k/8
                    # independent ones (each window is in three, with weights 1, -1/2, -1/2)
                    band = self.deadband * se * math.sqrt(8.0 / (3.0 * self._evidence_n))
                    mean = self._evidence
                    err = math.copysign(max(0.0, abs(mean) - band), mean)
                err = max(-1.0, min(0.5, err))
                if err < 0.0 or (err > 0.0 and not app_limited):
                    # Rprop: successive errors of opposite sign mean we straddle the knee,
                    # so halve the step (a quiet limit); the same sign, grow it back
                    if err * self._last_err < 0.0:
                        self._step = max(self.min_gain, 0.5 * self._step)
                    elif err * self._last_err > 0.0:
                        self._step = min(self.gain, 1.5 * self._step)
                    self._last_err = err
                    self._center *= math.exp(self._step * err)
                    if self.deadband * se > 1.0 - self.knee_elasticity:
                        # an estimate this noisy cannot tell the knee from linear scaling
                        # (e = 1): the move is mostly its windows' noise, and the next estimate
                        # would share two of them (correlation 2/3) and move again on the same
                        # noise. Keep only the latest window (appended below): the next
                        # estimate shares one
                        hist.clear()
                    self._pinned = err > 0.0 and self._center >= self.ceiling and self._rate_bound
        hist.append(window)
        ab = (window.a, window.b)
        self._base = ab if self._base is None else self._blend(self._base, ab, 0.25)
        self._probe_high = not self._probe_high
        self._apply(now, down=not self._probe_high)

    def _queued(self, sums: _Sums, n_mean: float, *, final: bool) -> float:
        """Calls in flight that wait instead of being served, by Little's law:
        ``N · (mean wait) / (mean time a permit is held)``.

        Two waits are visible: before the send, holding the permit (the rate-limit pacer), and
        at the server, in the time to first token above its floor (a streamed call's queue
        wait). The floor is the lowest window-mean TTFT seen, drifting up 1% per complete
        window so that it follows a change of prompts.
        """
        if sums.hold <= 0.0:
            return 0.0
        wait = sums.wait / sums.n
        if sums.n_ttft >= max(2, sums.n // 2):
            ttft = sums.ttft / sums.n_ttft
            floor = self._ttft_floor
            if final:
                self._ttft_floor = ttft if floor is None else min(floor * 1.01, ttft)
            if floor is not None:
                wait += max(0.0, ttft - floor)
        return n_mean * wait / (sums.hold / sums.n)

    # ---- mechanics ----------------------------------------------------------------------
    def _n_mean(self, sums: _Sums) -> float:
        n_mean = sums.inflight / sums.n
        if sums.max_inflight >= self._limit:
            # the limiter was full: calls ran at the limit, even those admitted while it
            # filled up after a step (their in-flight count at admission says less)
            n_mean = max(n_mean, float(self._limit))
        return n_mean

    def _window_size(self) -> int:
        half = math.ceil(self.window_fraction * self._limit)
        if self._slow_start:
            # about one latency per doubling, as TCP; a doubling is a step ~3.5x the probe's,
            # so a standard error 3x larger measures it as well
            size = max(min(self.window_samples, self._limit), half, 2)
            error = 3.0 * self.window_error
        else:
            size = max(self.window_samples, half)
            error = self.window_error
        if error > 0.0:
            # enough calls for the standard error of the window's mean ln R to be ``error``:
            # noisy backends get longer windows, clean ones short ones — but at most about
            # ``max_window_latencies`` latencies' worth, or a slow backend would answer late
            noisy = math.ceil(self._log_var / error**2)
            size = max(size, min(noisy, math.ceil(self.max_window_latencies * self._limit)))
        return min(size, self.max_window_samples)

    def _ln_r(self, a: float, b: float) -> float:
        """ln of a mean latency, priced at the current reference size."""
        return math.log(max(a + self._norm.reference_tokens * b, 1e-12))

    def _ln_x(self, w: _Window) -> float:
        """ln goodput of a window (Little): ``ln N − ln R + ln(1 − p)``."""
        return w.ln_n - self._ln_r(w.a, w.b) + w.ln_ok

    @staticmethod
    def _blend(
        old: tuple[float, float], new: tuple[float, float], alpha: float
    ) -> tuple[float, float]:
        return old[0] + alpha * (new[0] - old[0]), old[1] + alpha * (new[1] - old[1])

    def _restart(self, now: float, *, pinned: bool = False) -> None:
        """After a cut: forget the windows measured at the old level, start on a low probe."""
        self._pinned = pinned
        self._hist.clear()
        self._probe_high = False
        self._step = self.gain
        self._last_err = 0.0
        self._evidence = 0.0
        self._evidence_n = 0
        self._apply(now, down=True)
        self._guard_from = self._window_start

    def _apply(self, now: float, *, down: bool) -> None:
        ceiling = float(self.ceiling)
        if self._pinned and not self._slow_start:
            self._center = max(self._center, ceiling)
        self._center = min(max(self._center, float(self._low)), ceiling)
        c = self._center
        if self._slow_start:
            limit = self._clamp(round(c))
        else:
            lo = self._clamp(round(c * (1.0 - self.probe)))
            hi = self._clamp(max(round(c * (1.0 + self.probe)), lo + 1))
            limit = hi if self._probe_high else lo
        if limit < self._limit:
            down = True
        if limit != self._limit:
            self._limit = limit
            self.trace.append((now, limit))
        # after a step down, wait one latency: calls admitted meanwhile share the server
        # with the extra calls still draining
        self._window_start = now + (self._rtt if down else 0.0)
        self._reset_window()

    def _reset_window(self) -> None:
        self._drops = 0
        self._loss_ok = 0  # calls since the window opened, for the loss density check
        self._loss_drops = 0
        self._refused = math.inf  # the lowest in-flight rank of a call refused meanwhile
        self._w = _Sums()  # the open window
        self._c = _Sums()  # the latest calls (up to ``window_samples``), for the guards
        self._line = LengthLine()

    def _clamp(self, value: int) -> int:
        return min(max(value, self._low), self.ceiling)

    def __repr__(self) -> str:
        state = "slow start" if self._slow_start else f"centre {self._center:.1f}"
        return f"LLMLimit(limit={self._limit}, {state})"
