"""The chaos suite's short form (``benchmarks/chaos.py`` is the long one): 1,000+ calls of every
verb over real HTTP against three simulator processes that fail in every way (5xx, resets before
and during the response, malformed bodies and frames, no first byte, no end, 429 storms), one of
them SIGKILLed and restarted, 10% of the callers cancelled, the gateway closed under a burst."""

from __future__ import annotations

import pytest

from gptgate.sim.chaos import ChaosConfig, run_chaos


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    return run_chaos(
        # a CI box with 2 cores also runs three server processes: half a real second of slack
        # on the time bounds (the benchmark judges them with 0.2 s)
        # malformed bodies and storms often enough that a 40 s run surely meets both
        ChaosConfig(
            calls=1_000, burst=150, seed=7, time_scale=5.0, duration_s=40.0, slack_wall_s=0.5,
            garbage_rate=0.03, storm_every_s=12.0, storm_s=2.0,
            # shared= through a redis-server that is down when the gateway opens
            redis_up_after_s=10.0,
        )
    )


def _check(report, name: str):  # type: ignore[no-untyped-def]
    [check] = [c for c in report.invariants() if c.name.startswith(name)]
    return check


@pytest.mark.parametrize(
    "name",
    [
        "every call ended typed",
        "no call past its deadline",
        "no cut stream returned as a success",
        "a returned stream holds its guard's permit",
        "one call per backend before the fleet was seen",
        "no fleet permit left in Redis",
        "nothing held after close",
        "closing took",
        "retry amplification",
        "the API key appears nowhere",
    ],
)
def test_chaos_invariant(report, name: str) -> None:  # type: ignore[no-untyped-def]
    check = _check(report, name)
    assert check.ok, check.detail


def test_chaos_threw_everything(report) -> None:  # type: ignore[no-untyped-def]
    """The run really did meet every kind of trouble and every verb (a suite that injects
    nothing passes everything)."""
    assert report.started >= 1_000
    assert set(report.by_kind) == {
        "chat", "stream", "map", "submit", "guard", "preview", "guard_stream",
    }
    faults = report.faults
    assert faults["server_errors"] > 0 and faults["interrupted"] > 0
    assert faults["malformed"] > 0 and faults["rate_limited"] > 0
    assert report.outcomes["cancelled by its caller"] > 0
    assert report.outcomes["gptgate.GatewayClosedError"] > 0
    assert report.foreign_chunks > 0  # the permit check read guard-returned streams
    assert report.redis_up and report.fleet_permits_left is not None  # Redis came up late
    assert report.in_flight_before_redis  # and calls ran before it did


def test_chaos_ledger_is_near_the_bill(report) -> None:  # type: ignore[no-untyped-def]
    """The target is 0.5% (the benchmark judges it); here, a bound no estimate should ever
    miss: billed work the ledger does not see at all is a bug, not an estimate."""
    for name, (input_tokens, output_tokens) in report.ledger_tokens.items():
        bill = report.server_bill.get(name)
        if bill is None:
            continue
        ours, theirs = input_tokens + output_tokens, bill.input_tokens + bill.output_tokens
        unknown = report.uncertain_tokens[name]
        assert ours - unknown <= theirs * 1.05 and theirs <= ours * 1.05, (
            name, ours, theirs, report.books.table(name)
        )


def test_chaos_read_every_place_for_the_key(report) -> None:  # type: ignore[no-untyped-def]
    """The key check read spans, logs, errors and reprs (a check that reads nothing passes)."""
    for where in ("spans", "logs", "errors", "reprs"):
        assert report.key_checked.get(where, 0) > 0, (where, report.key_checked)


def test_the_key_watch_finds_a_key_in_a_span_and_a_log() -> None:
    import logging

    from gptgate.sim.chaos import _captured_logs, _KeyWatch, _telemetry

    watch = _KeyWatch("sk-test-" + "x" * 20)
    tracer, _ = _telemetry(watch)
    with tracer.get_tracer("t").start_as_current_span("call") as span:
        span.set_attribute("header", f"Bearer {watch.secret}")
    with _captured_logs(watch):
        logging.getLogger("gptgate.test").debug("sent with %s", watch.secret)
    assert watch.hits == {"spans": 1, "logs": 1}


def test_only_the_loops_measured_lateness_excuses_a_late_call() -> None:
    """A call past its deadline + 1 s is excused only by the event loop having been late
    just then — by as much: a deadline nobody enforced is still a failure."""
    from gptgate.sim.chaos import ChaosReport

    report = ChaosReport(ChaosConfig(time_scale=5.0, slack_wall_s=0.2))
    report.loop_lag_s = [(10.0, 0.001), (10.3, 0.4), (10.4, 0.001), (20.0, 0.001)]
    report.past_deadline = [
        (0.9, 5.0, "within the second"),
        (2.5, 10.35, "late while the loop was 0.4 s late"),  # 1 + (0.2 + 0.4) × 5 = 4
        (4.5, 10.4, "later than the loop explains"),
        (2.5, 20.0, "late while the loop was on time"),
    ]
    late, excused = report.overdue()
    assert excused == 1
    assert [entry.split(":")[0] for entry in late] == [
        "later than the loop explains", "late while the loop was on time",
    ]


def test_a_stall_after_the_deadline_excuses_as_much_as_it_lasted() -> None:
    """Shed by a timer one stall delayed and handed back through a second: late by both,
    though only the second is near its end (the chaos runs' map items: docs/guide/deadlines.md).
    Time the loop ran on after the deadline excuses nothing."""
    from gptgate.sim.chaos import ChaosReport

    report = ChaosReport(ChaosConfig(time_scale=5.0, slack_wall_s=0.2))
    # stalled [29.6, 30.0] and [30.2, 30.6]; on time before and after
    report.loop_lag_s = [(29.5, 0.001), (30.0, 0.4), (30.6, 0.4), (30.7, 0.001), (40.0, 0.001)]
    assert report.loop_stalled(29.6, 30.65) == pytest.approx(0.8, abs=0.01)
    assert report.loop_stalled(29.8, 30.4) == pytest.approx(0.4, abs=0.01)  # clipped
    report.past_deadline = [
        # deadline at 29.6 s: 1.05 s real past = 5.25 s ≤ 1 + (0.2 + 0.8) × 5; the lateness
        # near its end (0.4 s) alone allows 4 s
        (5.25, 30.65, "late by two stalls"),
        # deadline at 30.3 s, ended 1.5 s later: stalled 0.3 s of it, near the end 0.4 s
        (7.5, 31.8, "late past both stalls"),
    ]
    late, excused = report.overdue()
    assert excused == 1
    assert [entry.split(":")[0] for entry in late] == ["late past both stalls"]
