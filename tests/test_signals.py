"""``Backend(signals=True)``: the server's own load read into stats, the limit and the router."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from pydantic import ValidationError

import gptgate as gg
from gptgate.limits import LLMLimit
from gptgate.signals import ServerSignals, SignalLimit, SignalReader, server_wait_s
from gptgate.signals_parse import ServerLoad, merge_props, parse_metrics, parse_slots
from gptgate.sim import SimEngine, SimTransport
from gptgate.sim.signals import metrics_text
from gptgate.testing import LoopClock, run_virtual, sim_backend
from tests.test_limits_limiter import FakeClock

# -- the parsers, on each server's own text ---------------------------------------------------

# vLLM V1 (0.10+): kv_cache_usage_perc; prefix_cache_* counters
VLLM_NEW = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
vllm:num_requests_waiting{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.42
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 8192.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 5.0
vllm:time_to_first_token_seconds_count{model_name="m"} 5.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.7
"""

# vLLM V0 (≤ 0.9): gpu_cache_usage_perc, gpu_prefix_cache_hit_rate
VLLM_OLD = """\
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 8.0
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{model_name="m"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 0.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.9
# HELP vllm:gpu_prefix_cache_hit_rate GPU prefix cache block hit rate.
# TYPE vllm:gpu_prefix_cache_hit_rate gauge
vllm:gpu_prefix_cache_hit_rate{model_name="m"} 0.5
"""

SGLANG = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="qwen"} 30.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="qwen"} 7.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="qwen"} 0.61
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="qwen"} 0.25
"""

LLAMACPP_METRICS = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1024
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 5
"""

LLAMACPP_SLOTS = """[
 {"id": 0, "id_task": 12, "n_ctx": 4096, "speculative": false, "is_processing": true,
  "params": {"n_predict": -1}, "next_token": {"has_next_token": true, "n_remain": -1,
  "n_decoded": 31}},
 {"id": 1, "id_task": -1, "n_ctx": 4096, "speculative": false, "is_processing": false,
  "params": {"n_predict": -1}, "next_token": {"has_next_token": true, "n_remain": -1,
  "n_decoded": 0}},
 {"id": 2, "id_task": 13, "n_ctx": 4096, "speculative": false, "is_processing": true,
  "params": {"n_predict": -1}, "next_token": {"has_next_token": true, "n_remain": -1,
  "n_decoded": 4}}
]"""


def test_vllm_current_metrics_sum_every_engine() -> None:
    assert parse_metrics(VLLM_NEW) == ServerLoad(running=16, waiting=3, kv_usage=0.42)


def test_vllm_older_generation_names_are_read() -> None:
    assert parse_metrics(VLLM_OLD) == ServerLoad(running=8, waiting=0, kv_usage=0.9)


def test_sglang_names() -> None:
    assert parse_metrics(SGLANG) == ServerLoad(
        running=30, waiting=7, kv_usage=0.61, cache_hit_rate=0.25
    )


def test_llamacpp_metrics_slots_and_props() -> None:
    assert parse_metrics(LLAMACPP_METRICS) == ServerLoad(running=2, waiting=5)
    assert parse_slots(LLAMACPP_SLOTS) == ServerLoad(running=2, slots_total=3, slots_busy=2)
    assert merge_props(ServerLoad(), '{"total_slots": 4}').slots_total == 4


def test_the_simulator_speaks_the_parsed_format() -> None:
    load = parse_metrics(metrics_text("m", running=5, waiting=2, slots=8))
    assert load == ServerLoad(running=5, waiting=2, kv_usage=5 / 8)


@pytest.mark.parametrize("text", ["not prometheus {{{", "vllm:num_requests_running{ 1"])
def test_garbage_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_metrics(text)
    with pytest.raises(ValueError):
        parse_slots('{"slots": 1}')


def test_signals_interval_is_checked() -> None:
    with pytest.raises(ValidationError, match="signals_interval_s"):
        gg.Backend(name="v", provider="vllm", model="m", signals=True, signals_interval_s=0)


# -- the limit's hook -------------------------------------------------------------------------


def _reader(in_flight: list[int], provider: str = "vllm") -> tuple[SignalReader, FakeClock]:
    clock = FakeClock()
    backend = gg.Backend(name="v", provider=provider, model="m", signals=True)
    return SignalReader(backend, clock, lambda: in_flight[0]), clock


def test_a_waiting_queue_caps_the_limit_at_what_runs_and_staleness_lifts_it() -> None:
    in_flight = [20]
    reader, clock = _reader(in_flight)
    limit = SignalLimit(LLMLimit(initial=32, max_limit=64), reader)
    assert limit.limit == 32  # never read: the latency controller alone
    reader.observe(ServerLoad(running=12, waiting=8))
    assert limit.limit == 12  # 20 in flight, 8 of them wait: the knee is 12
    clock.t += 2.0
    in_flight[0] = 12
    reader.observe(ServerLoad(running=12, waiting=0))
    assert limit.limit == 13  # quiet at the cap: one more
    clock.t += 3 * reader.interval_s + 0.01
    assert reader.fresh() is None
    assert limit.limit == 32  # stale: latency alone again, no error
    assert limit.events == LLMLimit().events  # anything else is the controller's


def test_the_slot_count_is_a_ceiling() -> None:
    reader, _ = _reader([2], provider="llamacpp")
    limit = SignalLimit(LLMLimit(initial=16, max_limit=64), reader)
    reader.observe(ServerLoad(running=2, slots_total=4, slots_busy=2))
    assert limit.limit == 4


def test_free_slots_and_no_queue_raise_the_limit_to_the_slots_left_for_us() -> None:
    """llama-server, 8 slots: latency alone settled at 2–5 in flight (issue 35); the server
    says its slots are free and nothing waits, so the limit is what is free for us."""
    in_flight = [2]
    reader, clock = _reader(in_flight, provider="llamacpp")
    limit = SignalLimit(LLMLimit(initial=4, max_limit=64), reader)
    assert limit.limit == 4  # never read: latency alone
    reader.observe(ServerLoad(running=2, slots_total=8, slots_busy=2))
    assert limit.limit == 8
    reader.observe(ServerLoad(running=5, slots_total=8, slots_busy=5))
    assert limit.limit == 5  # another client runs 3 of the 8
    reader.observe(ServerLoad(running=8, waiting=2, slots_total=8, slots_busy=8))
    assert limit.limit <= 8 and reader.floor() is None  # a queue: the knee decides, no floor
    clock.t += 3 * reader.interval_s + 0.01
    assert limit.limit == 4  # stale: latency alone again
    idle = [0]
    fresh, _ = _reader(idle, provider="llamacpp")
    capped = SignalLimit(LLMLimit(initial=4, max_limit=6), fresh)
    fresh.observe(ServerLoad(running=0, slots_total=8, slots_busy=0))
    # nothing in flight: the read cannot show it is the whole server (one replica of a
    # balancer reads the same), so it is not acted on yet
    assert capped.limit == 4
    idle[0] = 1
    fresh.observe(ServerLoad(running=1, slots_total=8, slots_busy=1))
    assert capped.limit == 6  # never past max_concurrency


def test_the_servers_room_never_lifts_the_limit_past_the_controllers_ceiling() -> None:
    """Free slots say nothing of a scenario's window or an RPM/TPM budget: raised past the
    controller's ceiling, the extra calls only hold permits while they wait (family draw
    72: a knee of 64 kept as a floor where the rate allowed ~20, p99 4.7 s → 23.7 s)."""
    in_flight = [2]
    reader, _ = _reader(in_flight, provider="llamacpp")
    inner = LLMLimit(initial=4, max_limit=64)
    inner.set_window(None, 6)
    limit = SignalLimit(inner, reader)
    reader.observe(ServerLoad(running=2, slots_total=8, slots_busy=2))
    assert reader.floor() == 8
    assert limit.limit == 6


# -- the router's term ------------------------------------------------------------------------


def test_router_term_waiting_per_slot_and_kv_room() -> None:
    in_flight = [12]
    reader, _ = _reader(in_flight)
    assert server_wait_s(None, 1.0) == 0.0
    assert server_wait_s(reader, 1.0) == 0.0  # never read
    reader.observe(ServerLoad(running=8, waiting=4, kv_usage=0.0))
    assert server_wait_s(reader, 2.0) == pytest.approx(1.0)  # half a queue per slot × 2 s
    in_flight[0] = 8
    reader.observe(ServerLoad(running=8, waiting=0, kv_usage=1.0))
    assert server_wait_s(reader, 2.0) == pytest.approx(0.5)


# -- end to end over the simulator ------------------------------------------------------------


def _signal_gateway(clock: LoopClock, **options: Any) -> tuple[gg.Gateway, SimEngine]:
    profile = gg.sim.get_profile("gpu").model_copy(update={"slots": 4})
    backend, engine = sim_backend(
        profile, name="v", clock=clock, seed=1, signals=True, signals_interval_s=0.5, **options
    )
    return gg.Gateway([backend], clock=clock, seed=1), engine


def test_stats_show_the_servers_load_while_calls_run() -> None:
    async def main() -> tuple[list[ServerSignals], gg.BackendStats]:
        clock = LoopClock()
        gate, _ = _signal_gateway(clock, concurrency=12)
        seen: list[ServerSignals] = []
        async with gate:
            assert gate.stats()["v"].server == ServerSignals()  # never read yet
            async with anyio.create_task_group() as tg:
                for _ in range(24):
                    tg.start_soon(gate.chat, [{"role": "user", "content": "hi"}])
                for _ in range(6):
                    await anyio.sleep(0.5)
                    seen.append(gate.stats()["v"].server)
            return seen, gate.stats()["v"]

    seen, stats = run_virtual(main)
    assert any(s.running == 4 and (s.waiting or 0) > 0 for s in seen)
    assert all(s.age_s is not None and s.age_s <= 0.5 for s in seen)
    assert stats.failures == 0


def test_a_llama_servers_slots_are_filled_a_fraction_of_an_interval_after_the_first_calls() -> None:
    """The read at the open finds nothing in flight, so it cannot show the server whole and
    is not acted on (one replica behind a balancer reads the same); the next read, with the
    calls in flight, does. Waiting a whole interval for it cost family draw 92 (one
    llama-server of 23 slots, 0.5-s calls) 7 points of goodput: it comes an eighth of an
    interval later, and the reads keep their phase after it."""

    async def main() -> tuple[int, int, int]:
        clock = LoopClock()
        profile = gg.sim.get_profile("gpu").model_copy(
            update={"flavor": "llamacpp", "slots": 8}
        )
        backend, _ = sim_backend(
            profile, name="v", clock=clock, seed=1, provider="llamacpp", signals=True,
            signals_interval_s=2.0,
        )
        async with gg.Gateway([backend], clock=clock, seed=1) as gate:
            async with anyio.create_task_group() as tg:
                for _ in range(40):
                    tg.start_soon(gate.chat, [{"role": "user", "content": "hi"}])
                await anyio.sleep(0.05)
                before = gate.stats()["v"].limit
                await anyio.sleep(0.5)
                after = gate.stats()["v"].limit
                reader = gate._signals.readers["v"]
                reads = reader.reads
                await anyio.sleep(2.0)
                tg.cancel_scope.cancel()
            return before, after, reader.reads - reads

    before, after, reads_in_an_interval = run_virtual(main)
    assert before == 4  # the first read (nothing in flight yet) is not acted on
    assert after == 8  # the quick read after it, with calls in flight, is
    assert reads_in_an_interval == 1  # then one read an interval, as configured


def test_signals_off_leave_server_empty() -> None:
    async def main() -> ServerSignals:
        backend, _ = sim_backend("gpu", name="v", clock=LoopClock())
        async with gg.Gateway([backend], clock=LoopClock()) as gate:
            await gate.chat([{"role": "user", "content": "hi"}])
            await anyio.sleep(5)
            return gate.stats()["v"].server

    assert run_virtual(main) == ServerSignals()


class _BrokenMetrics(httpx2.AsyncBaseTransport):
    """The simulator for chat; ``/metrics`` answers ``mode`` (500, garbage, or a hang)."""

    def __init__(self, engine: SimEngine, mode: str) -> None:
        self.inner = SimTransport(engine)
        self.mode = mode
        self.metrics_reads = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path != "/metrics" or self.mode == "ok":
            return await self.inner.handle_async_request(request)
        self.metrics_reads += 1
        if self.mode == "hang":
            await anyio.sleep(3600)
        if self.mode == "garbage":
            return httpx2.Response(200, text="<html>nope {{{")
        return httpx2.Response(500, text="internal error")


@pytest.mark.parametrize("mode", ["500", "garbage", "hang"])
def test_a_failing_metrics_endpoint_leaves_calls_alone(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> tuple[gg.BackendStats, _BrokenMetrics, int]:
        clock = LoopClock()
        engine = SimEngine("gpu", clock=clock, seed=1)
        transport = _BrokenMetrics(engine, "ok")
        backend = gg.Backend(
            name="v", provider="vllm", base_url="http://127.0.0.1:8000/v1", model="m",
            transport=transport, signals=True, signals_interval_s=0.5,
        )
        async with gg.Gateway([backend], clock=clock) as gate:
            await anyio.sleep(0.6)
            assert gate.stats()["v"].server.running is not None
            transport.mode = mode
            results = [await gate.chat([{"role": "user", "content": "hi"}]) for _ in range(20)]
            await anyio.sleep(10)
            return gate.stats()["v"], transport, len(results)

    with caplog.at_level(logging.WARNING, logger="gptgate"):
        stats, transport, answered = run_virtual(main)
    assert answered == 20 and stats.failures == 0
    assert stats.server.age_s is not None and stats.server.age_s > 1.5  # stale, not erased
    assert transport.metrics_reads >= 2
    lines = [r for r in caplog.records if "server signals unreadable" in r.getMessage()]
    assert len(lines) == 1


def test_two_backends_one_with_half_the_slots_signals_keep_its_queue_short() -> None:
    """benchmarks/signals.py's job, shortened: with signals the small backend's server-side
    queue stays below a slot on average (latency alone let it reach several) at no loss of
    goodput, and the p99 is no worse."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from signals import job  # type: ignore[import-not-found]

    off = run_virtual(job, False, 1200, 1.0, 1, 1.0, "plateau", 0.3)
    on = run_virtual(job, True, 1200, 1.0, 1, 1.0, "plateau", 0.3)
    assert on.failed == off.failed == 0
    assert on.small_waiting <= 8 and on.small_waiting < 0.5 * off.small_waiting
    assert on.goodput >= 0.99 * off.goodput
    assert on.p99_s <= off.p99_s


def test_kv_usage_of_several_engines_is_their_mean_not_their_sum() -> None:
    """vLLM with ``--data-parallel-size 2`` publishes one label set per engine: their
    requests add up, their KV-cache shares do not (two engines 60% full are not a full one,
    which the limit reads as a queue)."""
    text = "\n".join([
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0",model_name="m"} 6.0',
        'vllm:num_requests_running{engine="1",model_name="m"} 5.0',
        "# TYPE vllm:kv_cache_usage_perc gauge",
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.6',
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5',
    ]) + "\n"
    load = parse_metrics(text)
    assert load.running == 11
    assert load.kv_usage == pytest.approx(0.55)


def _replica_reads(flavor: str, paths: list[str]) -> list[str]:
    """``GET`` each of ``paths`` in turn from a server of two replicas of 3 slots, loaded
    3 running + 1 waiting and 1 running."""
    profile = gg.sim.get_profile("gpu").model_copy(
        update={"flavor": flavor, "replicas": 2, "slots": 3}
    )

    async def main() -> list[str]:
        engine = SimEngine(profile, clock=LoopClock(), seed=1)
        for replica, (active, queued) in zip(engine._replicas, [(3, 1), (1, 0)], strict=True):
            replica.active, replica.queued = active, queued
        answers = [await engine.handle("GET", path, {}, b"") for path in paths]
        assert all(a.status == 200 for a in answers)
        return [bytes(a.body).decode() for a in answers]

    return run_virtual(main)


def test_a_vllm_server_of_two_engines_reports_each_and_the_reader_sums_them() -> None:
    (text,) = _replica_reads("openai", ["/metrics"])
    assert 'engine="1"' in text
    assert parse_metrics(text) == ServerLoad(running=4, waiting=1, kv_usage=pytest.approx(4 / 6))


def test_llama_servers_behind_a_balancer_report_one_replica_a_read() -> None:
    first, second, slots = _replica_reads("llamacpp", ["/metrics", "/metrics", "/slots"])
    # the balancer's round robin: each replica in turn, never the sum
    assert parse_metrics(first) == ServerLoad(running=3, waiting=1, kv_usage=1.0)
    assert parse_metrics(second) == ServerLoad(running=1, waiting=0, kv_usage=pytest.approx(1 / 3))
    assert parse_slots(slots) == ServerLoad(running=3, slots_total=3, slots_busy=3)


def test_reads_of_one_server_behind_a_balancer_are_ignored_not_a_ceiling(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two llama-servers of 2 slots behind one URL: each read shows one of them, which
    accounts for half of our 4 calls. Its 2 slots are not the server's: a ceiling there
    halved the goodput of family draw 34 (2 × 2). Reads that miss most of our calls in
    flight, most of the time, are no view of the server: the limit ignores them."""
    in_flight = [4]
    reader, _ = _reader(in_flight, provider="llamacpp")
    limit = SignalLimit(LLMLimit(initial=8, max_limit=64), reader)
    reader.observe(ServerLoad(running=2, slots_total=2, slots_busy=2))
    # not even the first read is a ceiling: it counts half of our calls (acted on, one
    # replica's first reads capped the limit at its slots and ended slow start at its
    # queue, and that outlived the verdict: family draws 60 and 1048)
    assert limit.limit == 8 and reader.cap() is None
    with caplog.at_level(logging.WARNING, logger="gptgate"):
        for running in (1, 2, 2, 0):
            reader.observe(ServerLoad(running=running, slots_total=2, slots_busy=running))
    assert reader.cap() is None and reader.floor() is None and reader.fresh() is None
    assert limit.limit == 8  # latency alone, as with signals off
    assert reader.snapshot().slots_total == 2  # still shown in stats, as read
    assert len([r for r in caplog.records if "in flight" in r.getMessage()]) == 1
    for _ in range(8):  # the whole server in view again (the balancer gone)
        reader.observe(ServerLoad(running=4, slots_total=4, slots_busy=4))
    assert reader.cap() == 4
    with caplog.at_level(logging.WARNING, logger="gptgate"):
        for _ in range(8):  # and partial again: ignored again, without another warning
            reader.observe(ServerLoad(running=1, slots_total=2, slots_busy=1))
    assert reader.partial
    assert len([r for r in caplog.records if "in flight" in r.getMessage()]) == 1


def test_a_whole_server_whose_calls_straggle_now_and_then_is_still_read() -> None:
    """A call stalled before the scheduler (or in transit) is not in the server's count:
    a read now and then that misses a call is no balancer."""
    in_flight = [4]
    reader, _ = _reader(in_flight, provider="llamacpp")
    for running in (4, 2, 4, 4, 1, 4, 4, 4):
        reader.observe(ServerLoad(running=running, slots_total=4, slots_busy=running))
    assert reader.cap() == 4


def test_slow_start_doubles_per_quiet_read_while_the_server_has_room() -> None:
    """Slow start doubles once a window of answers says the level did not queue: a latency
    or more per doubling (family draw 56, 1 × 38 slots: ~80 s of a 280-s job to reach 38).
    A read that shows every call of a full limit running, none waiting, says so every
    interval: the limit doubles per such read until the server queues, where the knee caps
    it."""
    in_flight = [4]
    reader, _ = _reader(in_flight)
    inner = LLMLimit(initial=4, max_limit=128)
    limit = SignalLimit(inner, reader)
    reader.observe(ServerLoad(running=4, waiting=0, kv_usage=0.1))
    assert limit.limit == 8
    in_flight[0] = 6  # not filled: no evidence about 8
    reader.observe(ServerLoad(running=6, waiting=0, kv_usage=0.2))
    assert limit.limit == 8
    in_flight[0] = 8
    reader.observe(ServerLoad(running=8, waiting=0, kv_usage=0.2))
    assert limit.limit == 16
    in_flight[0] = 16
    reader.observe(ServerLoad(running=12, waiting=4, kv_usage=0.9))
    assert limit.limit == 12  # queued: the knee
    assert inner.limit == 4 and inner.in_slow_start  # the controller's own state is its own


def test_no_ramp_once_the_controller_left_slow_start() -> None:
    in_flight = [4]
    reader, _ = _reader(in_flight)
    inner = LLMLimit(initial=4, max_limit=128)
    inner._slow_start = False
    limit = SignalLimit(inner, reader)
    reader.observe(ServerLoad(running=4, waiting=0, kv_usage=0.1))
    assert limit.limit == 4


def test_after_slow_start_what_the_server_ran_without_a_queue_stays_ours() -> None:
    """Family draw 56 (1 × 38 slots, every answer 400 tokens): each call slows as the batch
    grows, which the controller's slow start reads as a queue and leaves at a centre of ~8
    — while the server says 38 run and none wait. The server's knee is the floor."""
    in_flight = [4]
    reader, _ = _reader(in_flight)
    inner = LLMLimit(initial=4, max_limit=128)
    limit = SignalLimit(inner, reader)
    for level in (4, 8, 16, 32):
        in_flight[0] = level
        reader.observe(ServerLoad(running=level, waiting=0, kv_usage=level / 38))
    assert limit.limit == 64
    in_flight[0] = 50
    reader.observe(ServerLoad(running=38, waiting=12, kv_usage=1.0))
    assert limit.limit == 38  # queued: the knee caps the ramp
    inner._slow_start = False  # the controller's own exit, low (its centre, not the server's)
    inner._limit = 8
    in_flight[0] = 38
    assert limit.limit == 38
    reader.observe(ServerLoad(running=38, waiting=0, kv_usage=1.0 - 1e-9))
    assert limit.limit == 38  # KV full: no room for one more, and none taken away
    reader.observe(ServerLoad(running=38, waiting=0, kv_usage=0.9))
    assert limit.limit == 39  # quiet at the knee: one more, as before
    reader.observe(ServerLoad(running=20, waiting=5, kv_usage=1.0))
    assert limit.limit < 38  # another client's calls queue ours: the knee falls, and the cap
