"""Drift: a backend out of its baseline band for a sustained window starts one episode (one
warning, the ``gptgate.drift`` metric up, ``stats().drift``), which ends once it is back in
band for the window. Baseline files that cannot be used never fail a start."""

from __future__ import annotations

import functools
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import gptgate as gg
from gptgate.baseline import BANDS, BackendBaseline, BandFigures, Baseline, BaselineError, band_of
from gptgate.cache import PrefixGroup
from gptgate.drift import (
    HIT_RATE,
    LATENCY_P95,
    TOKENS_PER_S,
    TTFT_P95,
    DriftMonitor,
    DriftPolicy,
)
from gptgate.profiling import default_prompts, profile
from gptgate.sim import SimEngine, SimTransport
from gptgate.sim.drift_run import run_drift
from gptgate.sim.profiles import get_profile
from gptgate.telemetry import NAMES
from gptgate.testing import LoopClock, run_virtual, sim_backend

NOW = datetime.now(UTC)


def figures(**overrides: Any) -> BandFigures:
    values: dict[str, Any] = {
        "concurrency": 2, "latency_p50_s": 1.0, "latency_p95_s": 2.0, "latency_p99_s": 2.5,
        "ttft_p50_s": 0.1, "ttft_p95_s": 0.2, "ttft_p99_s": 0.3, "output_tokens_per_s": 100.0,
        "cache_hit_rate": 0.9, "samples": 50, "measured_at": NOW,
    }
    values.update(overrides)
    return BandFigures(**values)


def backend(**overrides: Any) -> gg.Backend:
    options: dict[str, Any] = {"name": "a", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
    options.update(overrides)
    return gg.Backend(**options)


def entry(**bands: BandFigures) -> BackendBaseline:
    return BackendBaseline(
        name="a", base_url="http://127.0.0.1:9/v1", model="m", hardware="gpu",
        bands=bands or {"1-4": figures()},
    )


POLICY = DriftPolicy(window_s=60, step_s=10, min_samples=5)


#: a prompt prefix long enough to be cached (>= 1,024 tokens)
PREFIX = PrefixGroup(key="p:shared", prefix_tokens=1_200)


def feed(
    monitor: DriftMonitor, start: float, end: float, *, latency: float, every: float = 1.0,
    inflight: int = 2, cached: int = 900,
) -> float:
    """One call ending each ``every`` seconds in [start, end), all with one cacheable prefix;
    returns end."""
    now = start
    while now < end:
        monitor.observe(
            now, inflight, latency, 0.1, int(100 * latency), 1000 + 200, cached, PREFIX
        )
        now += every
    return end


# -- the bands ---------------------------------------------------------------------------


def test_bands_cover_every_concurrency_once() -> None:
    for concurrency in range(1, 500):
        holding = [b.name for b in BANDS if b.holds(concurrency)]
        assert holding == [band_of(concurrency)]
    assert band_of(0) == "1-4" and band_of(4) == "1-4" and band_of(5) == "5-15"
    assert band_of(40) == "16-40" and band_of(41) == "41+" and band_of(10_000) == "41+"
    assert all(b.holds(b.level) for b in BANDS)


# -- episodes, on the monitor's own clock -----------------------------------------------------


def test_episode_starts_only_after_a_sustained_window_and_ends_after_one_in_band(
    caplog: pytest.LogCaptureFixture,
) -> None:
    monitor = DriftMonitor(backend(), entry(), POLICY)
    caplog.set_level(logging.INFO, logger="gptgate")
    now = feed(monitor, 0, 120, latency=1.5)  # in band: p95 1.5 <= 1.5 × 2.0
    assert not monitor.status.drifting and monitor.status.metrics == ()
    now = feed(monitor, now, now + 50, latency=4.0)  # out of band, but not for 60 s yet
    assert not monitor.status.drifting
    assert LATENCY_P95 in monitor.status.metrics
    now = feed(monitor, now, now + 20, latency=4.0)
    status = monitor.status
    assert status.drifting and status.episodes == 1
    assert status.since == 120  # the start of the run of out-of-band steps
    assert status.band == "1-4"
    assert status.live[LATENCY_P95] == 4.0 and status.expected[LATENCY_P95] == 3.0
    # back in band, but not for a window yet: still drifting
    now = feed(monitor, now, now + 50, latency=1.0)
    assert monitor.status.drifting and monitor.status.metrics == ()
    now = feed(monitor, now, now + 20, latency=1.0)
    assert not monitor.status.drifting and monitor.status.episodes == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # one per episode, not one per call or per step
    assert "'a'" in warnings[0].getMessage() and "latency_p95 4 s > 3 s" in warnings[0].getMessage()
    assert any("back within its baseline" in r.getMessage() for r in caplog.records)
    # a second episode is a second warning
    feed(monitor, now, now + 80, latency=4.0)
    assert monitor.status.drifting and monitor.status.episodes == 2
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


def test_a_spike_shorter_than_the_window_is_no_episode() -> None:
    monitor = DriftMonitor(backend(), entry(), POLICY)
    now = feed(monitor, 0, 40, latency=5.0)
    now = feed(monitor, now, now + 10, latency=1.0)  # one step in band breaks the run
    now = feed(monitor, now, now + 40, latency=5.0)
    assert not monitor.status.drifting and monitor.status.episodes == 0


def test_a_step_with_too_few_calls_is_not_judged() -> None:
    monitor = DriftMonitor(backend(), entry(), POLICY)
    feed(monitor, 0, 300, latency=9.0, every=80.0)  # 4 calls: under min_samples=5
    assert monitor.status.last_checked is None and not monitor.status.drifting


def test_load_in_a_band_the_baseline_lacks_is_not_compared() -> None:
    monitor = DriftMonitor(backend(), entry(), POLICY)
    feed(monitor, 0, 300, latency=9.0, inflight=30)  # band 16-40: not profiled
    assert monitor.status.last_checked is None and not monitor.status.drifting
    # and each band is judged against its own figures
    busy = figures(concurrency=24, latency_p95_s=8.0)
    monitor = DriftMonitor(backend(), entry(**{"1-4": figures(), "16-40": busy}), POLICY)
    feed(monitor, 0, 300, latency=9.0, inflight=30)  # 9 <= 1.5 × 8
    assert monitor.status.band == "16-40" and not monitor.status.drifting


def test_hit_rate_and_tokens_per_second_drift() -> None:
    monitor = DriftMonitor(backend(), entry(), POLICY)
    feed(monitor, 0, 80, latency=1.0, cached=600)  # 60% < 90% - 15 points
    assert monitor.status.drifting and monitor.status.metrics == (HIT_RATE,)
    assert monitor.status.expected[HIT_RATE] == pytest.approx(0.75)
    slow = DriftMonitor(backend(), entry(**{"1-4": figures(output_tokens_per_s=500.0)}), POLICY)
    feed(slow, 0, 80, latency=1.0)  # 99 tokens in 0.9 s after the first: 110/s < 0.75 × 500
    assert slow.status.drifting and slow.status.metrics == (TOKENS_PER_S,)


# -- like with like: a workload unlike the profile's (issue 30, item 9) -----------------------

#: a profile's band with what like-with-like needs: decode speed 100 tokens/s, answers of 200
#: tokens, 150 uncached prompt tokens a call
LIKE = figures(
    latency_p95_s=2.2, decode_tokens_per_s=100.0, output_tokens_mean=200.0,
    uncached_input_tokens_mean=150.0,
)


def test_short_prompts_are_not_cache_misses() -> None:
    """No prefix, or one under 1,024 tokens: nothing a provider caches, no hit rate."""
    monitor = DriftMonitor(backend(), entry(**{"1-4": LIKE}), POLICY)
    short = PrefixGroup(key="p:short", prefix_tokens=300)
    for i in range(300):
        prefix = None if i % 2 else short
        monitor.observe(float(i), 2, 2.1, 0.1, 200, 340, 0, prefix)
    assert monitor.status.last_checked is not None
    assert not monitor.status.drifting and HIT_RATE not in monitor.status.live


def test_the_first_call_of_a_prefix_is_no_cache_miss() -> None:
    """A long prompt seen once (a one-off document) cannot hit: not counted. A long shared
    prefix served before and now missed is a real drop."""
    monitor = DriftMonitor(backend(), entry(**{"1-4": LIKE}), POLICY)
    for i in range(300):
        one_off = PrefixGroup(key=f"p:doc{i}", prefix_tokens=3_000)
        monitor.observe(float(i), 2, 2.1, 0.1, 200, 3_100, 0, one_off)
    assert not monitor.status.drifting and HIT_RATE not in monitor.status.live
    cold = DriftMonitor(backend(), entry(**{"1-4": LIKE}), POLICY)
    for i in range(300):
        cold.observe(float(i), 2, 0.5, 0.1, 200, 1_300, 0, PREFIX)  # seen, never cached
    assert cold.status.drifting and cold.status.metrics == (HIT_RATE,)
    assert cold.status.live[HIT_RATE] == 0.0


@pytest.mark.parametrize("ttft", [0.1, None], ids=["streamed", "not-streamed"])
def test_answer_length_is_not_speed(ttft: float | None) -> None:
    """Answers of 20 or 1,000 tokens from a backend decoding as profiled (0.1 s to the first
    token, then 100 tokens/s): neither reads as slower, streamed or not."""
    monitor = DriftMonitor(backend(), entry(**{"1-4": LIKE}), POLICY)
    for i in range(600):
        output = 20 if i % 2 else 1_000
        monitor.observe(float(i), 2, 0.1 + (output - 1) / 100, ttft, output, 150, 0)
    status = monitor.status
    assert status.last_checked is not None and not status.drifting and status.episodes == 0
    assert status.live[TOKENS_PER_S] == pytest.approx(100.0)
    assert status.live[LATENCY_P95] <= 2.2


def test_a_long_uncached_prompt_is_not_a_slow_first_token() -> None:
    """Prefill of a 3,000-token prompt takes longer anywhere: TTFT and latency are compared
    over calls whose prompt needs about the profile's prefill."""
    monitor = DriftMonitor(backend(), entry(**{"1-4": LIKE}), POLICY)
    for i in range(300):
        monitor.observe(float(i), 2, 0.6 + 1.99, 0.6, 200, 3_000, 0)
    status = monitor.status
    assert not status.drifting and TTFT_P95 not in status.live and LATENCY_P95 not in status.live


def test_a_decode_slowdown_is_caught_whatever_the_answer_length() -> None:
    monitor = DriftMonitor(backend(), entry(**{"1-4": LIKE}), POLICY)
    for i in range(300):
        output = 20 if i % 2 else 1_000
        monitor.observe(float(i), 2, 0.1 + 1.5 * (output - 1) / 100, 0.1, output, 150, 0)
    assert monitor.status.drifting and TOKENS_PER_S in monitor.status.metrics


def test_the_uncacheable_prompt_repro_starts_no_episode() -> None:
    """The repro: profiled with the defaults, then short prompts (max_tokens 256) on the same
    simulator for 5 minutes: no episode (it was one within 76 s: 'cache_hit_rate 0% < 77%')."""

    async def main() -> Any:
        clock = LoopClock()
        sim, _ = sim_backend("gpu", name="gpu", clock=clock, seed=3, concurrency=2)
        baseline = await profile(gg.Gateway([sim], clock=clock), levels=[2], requests=50)
        async with gg.Gateway([sim], clock=clock, baseline=baseline) as gate:
            stop = clock.now() + 300

            async def worker() -> None:
                i = 0
                while clock.now() < stop:
                    await gate.chat([{"role": "user", "content": f"Q{i}: a name for a cat?"}],
                                    max_tokens=256)
                    i += 1

            async with anyio.create_task_group() as group:
                for _ in range(2):
                    group.start_soon(worker)
            return gate.stats()["gpu"].drift

    status = run_virtual(main)
    assert status is not None and status.last_checked is not None
    assert status.episodes == 0 and HIT_RATE not in status.live


# -- the benchmark rows (benchmarks/drift.py), in virtual time --------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_hour_of_traffic_unlike_the_profile_starts_no_episode(seed: int) -> None:
    run = run_virtual(functools.partial(run_drift, seed=seed, hours=1.0, concurrency=2))
    assert run.calls > 5_000 and run.episodes == 0


def test_a_1_5x_slowdown_is_caught_within_the_window_and_two_steps() -> None:
    policy = DriftPolicy()
    run = run_virtual(functools.partial(
        run_drift, seed=4, hours=0.5, concurrency=2, slowdown=1.5, slow_after_s=900.0,
    ))
    assert run.episodes == 1 and TOKENS_PER_S in run.metrics
    assert run.detected_after_s is not None
    assert run.detected_after_s <= policy.window_s + 2 * policy.step


def test_thresholds_are_configurable() -> None:
    lenient = DriftPolicy(window_s=60, step_s=10, min_samples=5, latency_p95_ratio=3.0)
    monitor = DriftMonitor(backend(), entry(), lenient)
    feed(monitor, 0, 200, latency=4.0)  # 4 <= 3 × 2
    assert not monitor.status.drifting
    with pytest.raises(ValueError, match="step_s"):
        DriftPolicy(window_s=10, step_s=20)
    with pytest.raises(ValueError):
        DriftPolicy(tokens_per_s_ratio=1.5)


# -- through a Gateway, on the simulator and a virtual clock ----------------------------------


class Switch(httpx2.AsyncBaseTransport):
    """A backend whose serving stack can be swapped mid-run (a degraded deployment)."""

    def __init__(self, current: httpx2.AsyncBaseTransport) -> None:
        self.current = current

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return await self.current.handle_async_request(request)


def _points(reader: InMemoryMetricReader) -> dict[frozenset[Any], int]:
    data = reader.get_metrics_data()
    points: dict[frozenset[Any], int] = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "gptgate.drift":
                    for point in metric.data.data_points:
                        value = getattr(point, "value", 0)
                        points[frozenset((point.attributes or {}).items())] = int(value)
    return points


def test_gateway_drift_episode_metric_log_and_stats(caplog: pytest.LogCaptureFixture) -> None:
    clock = LoopClock()
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    policy = DriftPolicy(min_samples=10)
    seen: dict[str, Any] = {}
    caplog.set_level(logging.INFO, logger="gptgate")
    workload = default_prompts(1)[0]  # live traffic like the profile's: one shared prefix

    async def main() -> None:
        healthy = SimTransport(SimEngine("gpu", clock=clock, seed=3))
        # the same deployment, decoding four times slower (a noisy neighbour, a bad driver)
        slow_profile = get_profile("gpu").model_copy(update={"base_step_s": 0.04})
        slow = SimTransport(SimEngine(slow_profile, clock=clock, seed=4))
        switch = Switch(healthy)
        sim = gg.Backend(
            name="gpu-a", base_url="http://127.0.0.1:8000/v1", model=get_profile("gpu").model,
            hardware="gpu", concurrency=2, transport=switch,
        )
        baseline = await profile(
            gg.GatewayConfig(backends=[sim]), levels=[2], requests=60, max_tokens=200, clock=clock
        )
        gate = gg.Gateway(
            [sim], clock=clock, meter_provider=meters, baseline=baseline, drift_policy=policy
        )
        async with gate:

            async def traffic(seconds: float) -> None:
                end = clock.now() + seconds

                async def worker() -> None:
                    while clock.now() < end:
                        await gate.chat(workload, max_tokens=200, stream=True)

                async with anyio.create_task_group() as group:
                    for _ in range(2):
                        group.start_soon(worker)

            await traffic(180)
            seen["healthy"] = gate.stats()["gpu-a"].drift
            seen["healthy_points"] = _points(reader)
            switch.current = slow
            await traffic(180)
            seen["slow"] = gate.stats()["gpu-a"].drift
            seen["slow_points"] = _points(reader)
            switch.current = healthy
            await traffic(180)
            seen["recovered"] = gate.stats()["gpu-a"].drift
            seen["recovered_points"] = _points(reader)

    run_virtual(main)
    healthy_status, slow_status, recovered = seen["healthy"], seen["slow"], seen["recovered"]
    assert healthy_status is not None and healthy_status.last_checked is not None
    assert not healthy_status.drifting and healthy_status.episodes == 0
    assert all(v == 0 for v in seen["healthy_points"].values())
    assert slow_status.drifting and slow_status.episodes == 1 and slow_status.band == "1-4"
    assert LATENCY_P95 in slow_status.metrics and TOKENS_PER_S in slow_status.metrics
    raised = {
        dict(k)[  # the figures that were out, per backend / hardware / band
            "gptgate.drift.metric"
        ]: v for k, v in seen["slow_points"].items()
    }
    assert raised[LATENCY_P95] == 1 and raised[TOKENS_PER_S] == 1
    some_point = dict(next(iter(seen["slow_points"])))
    assert some_point[NAMES["backend"]] == "gpu-a" and some_point[NAMES["hardware"]] == "gpu"
    assert some_point["gptgate.drift.band"] == "1-4"
    assert not recovered.drifting and recovered.episodes == 1
    assert all(v == 0 for v in seen["recovered_points"].values())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "'gpu-a' (gpu) has drifted" in warnings[0]


def test_stats_drift_is_none_without_a_baseline() -> None:
    clock = LoopClock()

    async def main() -> gg.BackendStats:
        sim = gg.Backend(
            name="gpu-a", base_url="http://127.0.0.1:8000/v1", model="m", concurrency=2,
            transport=SimTransport(SimEngine("gpu", clock=clock)),
        )
        async with gg.Gateway([sim], clock=clock) as gate:
            await gate.chat([{"role": "user", "content": "hi"}], max_tokens=5)
            return gate.stats()["gpu-a"]

    assert run_virtual(main).drift is None


# -- baselines that cannot be used ---------------------------------------------------------


def write_baseline(path: Path, **changes: Any) -> Path:
    document = Baseline(backends=[entry()]).model_dump(mode="json")
    document.update(changes)
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "no such file"),
        ("{not json", "not JSON"),
        ('{"version": 2, "backends": []}', "unsupported version 2"),
        ('{"version": 1}', "backends: Field required"),
        ("[1, 2]", "not a valid baseline"),
    ],
)
def test_bad_baseline_file_is_a_one_line_typed_error(
    tmp_path: Path, content: str | None, expected: str
) -> None:
    path = tmp_path / "baseline.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(BaselineError) as caught:
        Baseline.load(path)
    message = str(caught.value)
    assert message.startswith(str(path)) and expected in message and "\n" not in message


def test_bad_figures_name_the_field(tmp_path: Path) -> None:
    good = Baseline(backends=[entry()]).model_dump(mode="json")
    good["backends"][0]["bands"]["1-4"]["latency_p95_s"] = -1
    (tmp_path / "b.json").write_text(json.dumps(good))
    with pytest.raises(BaselineError, match=r"backends\.0\.bands\.1-4\.latency_p95_s"):
        Baseline.load(tmp_path / "b.json")
    good["backends"][0]["bands"]["1-4"]["latency_p95_s"] = 2.0
    good["backends"][0]["bands"] = {"2-9": good["backends"][0]["bands"]["1-4"]}
    (tmp_path / "b.json").write_text(json.dumps(good))
    with pytest.raises(BaselineError, match="unknown band '2-9'"):
        Baseline.load(tmp_path / "b.json")
    good["backends"][0]["bands"] = {"41+": good["backends"][0]["bands"]["2-9"]}
    (tmp_path / "b.json").write_text(json.dumps(good))
    with pytest.raises(BaselineError, match="measured at concurrency 2, which is in band '1-4'"):
        Baseline.load(tmp_path / "b.json")


def test_baseline_round_trips_and_saves_atomically(tmp_path: Path) -> None:
    baseline = Baseline(backends=[entry(**{"1-4": figures(), "41+": figures(concurrency=48)})])
    path = tmp_path / "baseline.json"
    baseline.save(path)
    assert Baseline.load(path) == baseline
    assert json.loads(path.read_text())["version"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["baseline.json"]  # no temporary left


def _gate_with(baseline: Any, **backend_overrides: Any) -> gg.BackendStats:
    clock = LoopClock()
    options: dict[str, Any] = {
        "name": "a", "base_url": "http://127.0.0.1:9/v1", "model": "m", "concurrency": 2,
    }
    options.update(backend_overrides)

    async def main() -> gg.BackendStats:
        options["transport"] = SimTransport(SimEngine("gpu", clock=clock))
        async with gg.Gateway([gg.Backend(**options)], clock=clock, baseline=baseline) as gate:
            await gate.chat([{"role": "user", "content": "hi"}], max_tokens=5)
            return gate.stats()[options["name"]]

    return run_virtual(main)


@pytest.mark.parametrize(
    ("make", "overrides", "logged"),
    [
        (lambda tmp: tmp / "missing.json", {}, "no such file"),
        (lambda tmp: write_baseline(tmp / "b.json", version=7), {}, "unsupported version"),
        (
            lambda tmp: write_baseline(
                tmp / "b.json", created_at=(NOW - timedelta(days=90)).isoformat()
            ),
            {},
            "is stale",
        ),
        (lambda tmp: write_baseline(tmp / "b.json"), {"model": "other"}, "measured model 'm'"),
        (
            lambda tmp: write_baseline(tmp / "b.json"),
            {"base_url": "http://10.0.0.1:9/v1"},
            "configured 'm' at http://10.0.0.1:9/v1",
        ),
        (lambda tmp: write_baseline(tmp / "b.json"), {"name": "b"}, "has no entry for it"),
    ],
)
def test_unusable_baseline_is_one_log_line_and_no_drift_checking(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    make: Any,
    overrides: dict[str, Any],
    logged: str,
) -> None:
    caplog.set_level(logging.INFO, logger="gptgate")
    name = overrides.get("name", "a")
    stats = _gate_with(make(tmp_path), **overrides)
    assert stats.name == name and stats.drift is None and stats.calls == 1
    lines = [r.getMessage() for r in caplog.records if "drift not checked" in r.getMessage()]
    assert len(lines) == 1 and logged in lines[0], lines


def test_a_baseline_that_fits_is_used(tmp_path: Path) -> None:
    stats = _gate_with(write_baseline(tmp_path / "b.json"))
    assert stats.drift is not None and not stats.drift.drifting


def test_baseline_argument_is_checked_at_construction() -> None:
    with pytest.raises(gg.BadRequestError, match="baseline must be a path"):
        gg.Gateway([backend()], baseline=42)  # type: ignore[arg-type]
    with pytest.raises(gg.BadRequestError, match="drift_policy"):
        gg.Gateway([backend()], drift_policy={"window_s": 5})  # type: ignore[arg-type]


def test_calls_through_gate_http_client_are_watched_too() -> None:
    """An SDK sending through ``gate.http_client`` is judged on latency and tokens/s (the
    tap reads no cached tokens, so the hit rate is left alone, not read as misses)."""
    clock = LoopClock()
    fast = entry(**{"1-4": figures(latency_p95_s=0.5, output_tokens_per_s=50.0)})
    baseline = Baseline(backends=[fast])

    async def main() -> Any:
        sim = gg.Backend(
            name="a", base_url="http://127.0.0.1:9/v1", model="m", concurrency=2,
            transport=SimTransport(SimEngine("gpu", clock=clock, seed=5)),
        )
        async with gg.Gateway([sim], clock=clock, baseline=baseline, drift_policy=POLICY) as gate:
            client = gate.http_client("a")
            while clock.now() < 120:
                response = await client.post(
                    "/chat/completions",
                    json={"model": "m", "max_tokens": 100,
                          "messages": [{"role": "user", "content": "hi"}]},
                )
                assert response.status_code == 200
            await client.aclose()
            return gate.stats()["a"].drift

    status = run_virtual(main)
    assert status is not None and status.drifting and status.metrics == (LATENCY_P95,)
    assert HIT_RATE not in status.live
