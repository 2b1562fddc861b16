"""A toy LLM server in virtual time, for driving pure limits without an event loop.

Processor sharing with a USL-shaped aggregate rate: with ``n`` calls in service each decodes at
``rate / (1 + σ(n−1) + κn(n−1))`` tokens/s, so the server's throughput is
``X(n) ∝ n / (1 + σ(n−1) + κn(n−1))`` (peak at ``√((1−σ)/κ)``). Optionally only ``slots`` calls
are served at once (continuous batching); the rest wait in a bounded FIFO queue, and a call
arriving at a full queue is rejected (a 429/503) after ``reject_s``. The client is closed-loop
with an infinite backlog: it keeps ``limit.limit`` calls in flight, exactly like the Limiter.
Seeded and deterministic.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from gptgate.limits import FixedLimit, Limit, LLMLimit, Sample


@dataclass
class _Call:
    submit: float
    inflight: int
    tokens: int
    ttft: float | None = None


@dataclass
class ToyServer:
    rate: float = 50.0  # tokens/s of a lone call
    sigma: float = 0.02
    kappa: float = 0.001
    slots: int | None = None
    queue_max: int = 1_000
    prefill_tokens: float = 10.0  # prefill work in decode-token equivalents
    reject_s: float = 0.05
    stream: bool = True
    #: per-call lognormal spread of the work per token (prompt mix, sampling, network)
    jitter: float = 0.0

    def slowdown(self, n: int) -> float:
        return 1.0 + self.sigma * (n - 1) + self.kappa * n * (n - 1)

    def throughput(self, n: int) -> float:
        """Relative aggregate rate with ``n`` calls in flight (queued ones do not count)."""
        if self.slots is not None:
            n = min(n, self.slots)
        return n / self.slowdown(n) if n > 0 else 0.0

    def knee(self, max_n: int = 200) -> int:
        """The hidden knee: the concurrency of peak throughput (the first, if it is flat)."""
        return max(range(1, max_n + 1), key=lambda n: (round(self.throughput(n), 9), -n))

    def halve(self) -> None:
        """Lose half the capacity: half the slots, or (no slots) a USL peak at half the N."""
        if self.slots is not None:
            self.slots //= 2
        else:
            self.kappa *= 4


@dataclass
class ToyRun:
    server: ToyServer
    limit: Limit
    seed: int = 1
    mean_tokens: float = 200.0
    #: (completions, time, limit) after each completion
    history: list[tuple[int, float, int]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    done_at: list[float] = field(default_factory=list)
    rejected: int = 0

    def run(
        self, completions: int, on_completion: Callable[[int, ToyRun], None] | None = None
    ) -> ToyRun:
        rng = random.Random(self.seed)
        srv = self.server
        t = 0.0
        v = 0.0  # work done by every call in service (processor sharing)
        seq = itertools.count()
        vheap: list[tuple[float, int, str, _Call]] = []  # events in work-space
        theap: list[tuple[float, int, _Call]] = []  # rejections in time-space
        queue: list[_Call] = []
        qhead = 0
        in_service = 0
        inflight = 0
        finished = 0

        def tokens() -> int:
            # lognormal answer lengths, mean ≈ mean_tokens, clipped
            x = rng.lognormvariate(math.log(self.mean_tokens) - 0.5 * 0.6**2, 0.6)
            return max(2, min(4_000, round(x)))

        def start_service(call: _Call) -> None:
            nonlocal in_service
            in_service += 1
            k = rng.lognormvariate(-0.5 * srv.jitter**2, srv.jitter) if srv.jitter else 1.0
            first = k * (srv.prefill_tokens + 1.0)
            heapq.heappush(vheap, (v + first, next(seq), "first", call))
            done = k * (srv.prefill_tokens + call.tokens)
            heapq.heappush(vheap, (v + done, next(seq), "done", call))

        def admit() -> None:
            nonlocal inflight, qhead
            while inflight < self.limit.limit:
                inflight += 1
                call = _Call(submit=t, inflight=inflight, tokens=tokens())
                if srv.slots is None or in_service < srv.slots:
                    start_service(call)
                elif len(queue) - qhead < srv.queue_max:
                    queue.append(call)
                else:
                    heapq.heappush(theap, (t + srv.reject_s, next(seq), call))

        admit()
        while finished < completions:
            rate = srv.rate / srv.slowdown(in_service) if in_service else 0.0
            t_v = t + (vheap[0][0] - v) / rate if vheap and rate > 0 else math.inf
            t_t = theap[0][0] if theap else math.inf
            if t_v <= t_t:
                v_target, _, kind, call = heapq.heappop(vheap)
                t, v = t_v, v_target
                if kind == "first":
                    call.ttft = t - call.submit
                    continue
                in_service -= 1
                while qhead < len(queue) and (srv.slots is None or in_service < srv.slots):
                    start_service(queue[qhead])
                    qhead += 1
                sample = Sample(
                    start=call.submit,
                    latency_s=t - call.submit,
                    inflight=call.inflight,
                    kind="ok",
                    ttft_s=call.ttft if srv.stream else None,
                    output_tokens=call.tokens,
                )
                finished += 1
                self.latencies.append(t - call.submit)
                self.done_at.append(t)
            else:
                _, _, call = heapq.heappop(theap)
                v += rate * (t_t - t)
                t = t_t
                self.rejected += 1
                sample = Sample(
                    start=call.submit,
                    latency_s=srv.reject_s,
                    inflight=call.inflight,
                    kind="dropped",
                )
            inflight -= 1
            self.limit.update(sample, t)
            self.history.append((finished, t, self.limit.limit))
            if on_completion is not None and sample.kind == "ok":
                on_completion(finished, self)
            admit()
        return self

    # ---- measurements -------------------------------------------------------------------
    def limits_between(self, first: int, last: int) -> list[int]:
        return [lim for done, _, lim in self.history if first < done <= last]

    def mean_limit(self, first: int, last: int) -> float:
        values = self.limits_between(first, last)
        return sum(values) / len(values)

    def throughput(self, first: int, last: int) -> float:
        return (last - first) / (self.done_at[last - 1] - self.done_at[first - 1])

    def p99(self, first: int, last: int) -> float:
        values = sorted(self.latencies[first:last])
        return values[min(len(values) - 1, int(0.99 * len(values)))]


# ---- the tests --------------------------------------------------------------------------

CAPACITIES: dict[str, dict[str, Any]] = {
    "usl-22": {"sigma": 0.02, "kappa": 0.002},  # peak at √(0.98/0.002) ≈ 22, then falls
    "slots-12": {"sigma": 0.03, "kappa": 0.0, "slots": 12, "queue_max": 64},
    "slots-40": {"sigma": 0.02, "kappa": 0.0, "slots": 40, "queue_max": 10},  # 429s past 50
}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("capacity", list(CAPACITIES))
def test_llm_limit_finds_the_hidden_knee_and_refinds_it_after_capacity_halves(
    capacity: str, stream: bool
) -> None:
    server = ToyServer(jitter=0.1, stream=stream, **CAPACITIES[capacity])
    knee = server.knee()
    change = 3_000

    def halve_at_change(done: int, run: ToyRun) -> None:
        if done == change:
            server.halve()

    run = ToyRun(server, LLMLimit(max_limit=128), seed=1).run(change + 1_200, halve_at_change)
    settled = run.mean_limit(1_000, change)
    assert 0.75 * knee <= settled <= 1.25 * knee, (knee, settled)
    # capacity halves at `change`: within ~200 completions the limit has followed
    new_knee = server.knee()
    assert new_knee == knee // 2
    after = run.mean_limit(change + 200, change + 1_200)
    assert 0.75 * new_knee <= after <= 1.25 * new_knee, (new_knee, after)
    assert min(run.limits_between(change, change + 200)) <= 1.25 * new_knee
    # a bounded server queue (slots-40) rejects: the loss rule keeps that rare
    assert run.rejected <= 0.02 * len(run.latencies)


def test_llm_limit_goodput_is_close_to_the_best_fixed_limit() -> None:
    params: dict[str, Any] = {
        "sigma": 0.02,
        "kappa": 0.0,
        "slots": 30,
        "queue_max": 100,
        "jitter": 0.1,
    }
    fixed = {}
    for n in (1, 5, 10, 20, 30, 50, 80):
        run = ToyRun(ToyServer(**params), FixedLimit(n), seed=1).run(2_500)
        fixed[n] = (run.throughput(500, 2_500), run.p99(500, 2_500))
    best = max(x for x, _ in fixed.values())
    smallest_near_best = min(n for n, (x, _) in fixed.items() if x >= 0.9 * best)
    auto = ToyRun(ToyServer(**params), LLMLimit(), seed=1).run(4_000)
    assert auto.throughput(1_000, 4_000) >= 0.93 * best
    assert auto.p99(1_000, 4_000) <= 1.25 * fixed[smallest_near_best][1]


def test_toy_run_is_deterministic() -> None:
    def once() -> list[tuple[int, float, int]]:
        server = ToyServer(jitter=0.1, **CAPACITIES["slots-12"])
        return ToyRun(server, LLMLimit(), seed=7).run(500).history

    assert once() == once()
