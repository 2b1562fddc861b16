"""Profiles: presets exist and have the *relative* shapes of the field U-curve and hardware data.

Only comparisons between profiles or between load levels are asserted, never the knob values,
so the presets can be re-tuned without touching these tests. Timing runs in virtual time, so
the results are exact and independent of machine load.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass

import anyio
import pytest

from gptgate.sim import PROFILES, LoopClock, SimEngine, get_profile, run_virtual
from gptgate.sim.calibrate import make_prompts, run_row


def test_presets_and_lookup() -> None:
    assert {"hosted", "tpu", "gpu", "cpu", "llamacpp"} <= set(PROFILES)
    with pytest.raises(KeyError, match=r"known: .*gpu"):
        get_profile("quantum")
    hosted = get_profile("hosted")
    assert hosted.replicas > 1 and hosted.prefix_overflow_rpm is not None
    assert hosted.rpm and hosted.tpm and hosted.queue_full_status == 429
    llama = get_profile("llamacpp")
    assert llama.flavor == "llamacpp" and llama.max_queue is None and llama.rpm is None
    assert get_profile("cpu").model != get_profile("gpu").model  # a small model


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_usl_throughput_rises_then_falls_past_the_knee(name: str) -> None:
    p = get_profile(name)
    throughput = [b / p.step_time(b) for b in range(1, 400)]
    assert throughput[1] > throughput[0]
    knee = int(p.knee)
    assert throughput[knee - 1] >= throughput[0]
    assert throughput[-1] < max(throughput)


def test_knees_sit_at_different_places() -> None:
    assert get_profile("cpu").knee < get_profile("gpu").knee < get_profile("tpu").knee


@dataclass(frozen=True)
class Load:
    ttft_p50: float
    latency_p50: float
    latency_p99: float
    throughput: float


def _measure(name: str, concurrency: int, requests: int) -> Load:
    """Stream ``requests`` distinct ~1k-token prompts at a fixed concurrency."""

    async def main() -> Load:
        engine = SimEngine(name, clock=LoopClock(), seed=11)
        limiter = anyio.CapacityLimiter(concurrency)
        ttfts: list[float] = []
        latencies: list[float] = []

        async def one(i: int) -> None:
            body = json.dumps(
                {"messages": [{"role": "user", "content": f"{i} " + "word " * 800}], "stream": True}
            ).encode()
            async with limiter:
                t0 = anyio.current_time()
                r = await engine.handle("POST", "/v1/chat/completions", {}, body)
                assert r.status == 200 and r.stream is not None
                first = None
                async for _ in r.stream:
                    first = first or anyio.current_time() - t0
                assert first is not None
                ttfts.append(first)
                latencies.append(anyio.current_time() - t0)

        start = anyio.current_time()
        async with anyio.create_task_group() as tg:
            for i in range(requests):
                tg.start_soon(one, i)
        total = anyio.current_time() - start
        q = statistics.quantiles(latencies, n=100)
        return Load(statistics.median(ttfts), q[49], q[98], requests / total)

    return run_virtual(main)


def test_hardware_shapes_at_low_and_high_concurrency() -> None:
    low = {name: _measure(name, 1, 20) for name in ("tpu", "gpu", "cpu")}
    high = {name: _measure(name, 96, 480) for name in ("tpu", "gpu")}
    # low load: the GPU answers first; TPU's first token is a little slower; CPU is slowest
    assert low["gpu"].ttft_p50 < low["tpu"].ttft_p50 < low["cpu"].ttft_p50
    assert low["cpu"].latency_p50 > max(low["gpu"].latency_p50, low["tpu"].latency_p50)
    # high load: the TPU batches best; the GPU queues and its P99 diverges
    assert high["tpu"].throughput > 1.5 * high["gpu"].throughput
    gpu_p99_growth = high["gpu"].latency_p99 / low["gpu"].latency_p99
    tpu_p99_growth = high["tpu"].latency_p99 / low["tpu"].latency_p99
    assert gpu_p99_growth > 2 * tpu_p99_growth
    assert high["gpu"].ttft_p50 > 5 * high["tpu"].ttft_p50  # queued, not batched
    # the GPU saturates early: more concurrency buys it little throughput, the TPU a lot
    gpu_mid = _measure("gpu", 24, 240)
    tpu_mid = _measure("tpu", 24, 240)
    assert high["gpu"].throughput / gpu_mid.throughput < high["tpu"].throughput / tpu_mid.throughput


def test_hosted_resembles_the_seeds_u_curve() -> None:
    """A cut-down calibration table: near-linear at first, flat then falling at the top,
    and more tokens billed at high concurrency (retried and abandoned work)."""
    profile = get_profile("hosted")

    async def table() -> dict[int, tuple[float, float, float]]:
        out = {}
        for c, n in ((1, 40), (10, 300), (30, 600), (50, 600), (80, 600)):
            row = await run_row(profile, c, make_prompts(n, seed=c), LoopClock(), seed=1)
            out[c] = (row.mean_latency_s, row.throughput, row.tokens_per_request)
        return out

    rows = run_virtual(table)
    lat1, x1, tok1 = rows[1]
    assert 1.5 < lat1 < 2.3
    assert rows[10][1] > 7 * x1  # near-linear
    assert rows[30][1] > 2.0 * rows[10][1]
    assert rows[50][1] < 1.4 * rows[30][1]  # flattening
    assert rows[80][1] < rows[50][1]  # falling past the knee
    assert rows[80][0] > 2.5 * lat1
    assert rows[80][2] > 1.05 * tok1  # billed tokens rise
