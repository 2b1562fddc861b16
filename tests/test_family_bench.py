"""benchmarks/family.py (issue 31): its judges decide the issue's rules right on figures made
up to sit on each side of every bound, and the harness runs each judge on a real draw, end to
end, at tiny sizes (virtual time: a second or two of CPU)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import family  # noqa: E402
from _family_judges import (  # noqa: E402
    AdaptiveFigures,
    CacheFigures,
    Client,
    HedgeFigures,
    LimitRun,
    TierFigures,
    Verdict,
    judge_adaptive,
    judge_cache,
    judge_hedge,
    judge_tiers,
    summarise,
)


def _by_rule(verdicts: list[Verdict]) -> dict[str, Verdict]:
    return {v.rule: v for v in verdicts}


# --------------------------------------------------------------------------- cache gate


def _cache(gate: Client, plain: Client | None = None, hand: Client | None = None) -> dict[
    str, Verdict
]:
    plain = plain or Client(hit=0.60, time_s=100.0)
    hand = hand or Client(hit=0.80, time_s=120.0)
    return _by_rule(judge_cache(CacheFigures(plain, hand, gate, calls=400)))


def test_cache_gate_is_judged_against_the_better_client_in_hits_and_that_clients_time() -> None:
    # hand has the better hit rate: the bound is its hits − 2 points at ≤ 1.05× its time
    assert _cache(Client(0.785, 126.0))["cache"].ok
    assert not _cache(Client(0.775, 100.0))["cache"].ok  # 2.5 points under hand
    assert not _cache(Client(0.85, 127.0))["cache"].ok  # 1.058× hand's time
    # a tie in hits: the faster client is the reference
    tie = _cache(Client(0.80, 105.5), plain=Client(0.80, 100.0), hand=Client(0.80, 130.0))
    assert not tie["cache"].ok and "plain" in tie["cache"].detail


def test_cache_floor_bounds_the_loss_to_the_plain_client_on_every_draw() -> None:
    floor = _cache(Client(0.56, 109.0))["cache floor"]  # −4 points, 1.09× plain's time
    assert floor.ok and floor.margin == pytest.approx(1.0)
    assert not _cache(Client(0.54, 90.0))["cache floor"].ok  # −6 points
    assert not _cache(Client(0.90, 111.0))["cache floor"].ok  # 1.11× plain's time


def test_cache_gate_failing_calls_the_others_completed_misses_however_fast() -> None:
    verdicts = _cache(Client(0.95, 30.0, failed=266))
    assert not verdicts["cache"].ok and not verdicts["cache floor"].ok
    assert "266 more calls failed" in verdicts["cache"].detail


def test_a_reference_that_gave_up_on_calls_is_timed_for_the_whole_job() -> None:
    """Family draw 6: the hand warm-up failed 218 of 400 calls (a bounded queue refusing
    past its retries), gptgate none; the hand's 1,913 s were the time of 182 calls, and
    gptgate's 3,958 s for all 400 read as 2.07× it. A job cut short is not the same job either
    way: the reference's time is its time per completed call, over the whole job."""
    hand = Client(0.89, 1913.0, failed=218)
    plain = Client(0.873, 2351.7, failed=155)
    verdicts = _cache(Client(0.916, 3958.3), plain=plain, hand=hand)
    assert verdicts["cache"].ok, verdicts["cache"].detail  # 0.94× hand's 400-call time
    assert verdicts["cache floor"].ok, verdicts["cache floor"].detail  # 1.03× plain's
    assert "218 of its calls failed" in verdicts["cache"].detail
    # a gate slower per completed call still misses
    assert not _cache(Client(0.916, 4500.0), plain=plain, hand=hand)["cache"].ok


def test_a_reference_that_gave_up_is_timed_no_faster_than_the_server_s_rate_limit() -> None:
    """Family draw 26 (44,371 TPM): the plain client completed 112 of 400 calls in 425 s out of
    the full bucket it started with; per completed call that is 1,518 s for 400, which the
    limit admits in no less than 1,742 s. gptgate, completing all 400 in 1,773 s, ran at the
    limit (1.02× it) and was judged 1.17× "slower". The reference's time is now never below the
    time the limit takes to admit the calls; a gate slower than that still misses."""
    plain = Client(0.503, 425.0, failed=288)
    hand = Client(0.468, 439.3, failed=284)

    def judged(gate_s: float, floor_s: float) -> dict[str, Verdict]:
        return _by_rule(judge_cache(
            CacheFigures(plain, hand, Client(0.603, gate_s), calls=400, rate_floor_s=floor_s)
        ))

    assert not judged(1773.3, 0.0)["cache floor"].ok  # per completed call: 1.17×
    verdicts = judged(1773.3, 1742.4)
    assert verdicts["cache"].ok and verdicts["cache floor"].ok, verdicts["cache"].detail
    assert "rate limit" in verdicts["cache"].detail
    assert not judged(1.06 * 1742.4, 1742.4)["cache"].ok  # 1.06× the limit's time
    # a reference that completed every call keeps its own time, whatever the floor
    full = _by_rule(judge_cache(CacheFigures(
        Client(0.5, 1000.0), hand, Client(0.6, 1200.0), calls=400, rate_floor_s=1742.4
    )))
    assert not full["cache floor"].ok


def test_the_rate_floor_is_the_last_admission_under_the_server_s_buckets() -> None:
    """RPM 60, bucket full at the start: 60 calls at once, then one a second."""
    items = [[{"role": "user", "content": f"q{i}"}] for i in range(100)]
    limits = {"rpm": 60, "tpm": None, "rpm_window_s": 60.0}
    profile = family.draw(3).server.model_copy(update=limits)
    assert family.rate_floor_s(profile, items, 100) == pytest.approx(40.0)
    assert family.rate_floor_s(profile, items, 50) == 0.0
    unlimited = profile.model_copy(update={"rpm": None})
    assert family.rate_floor_s(unlimited, items, 100) == 0.0
    # TPM: each call reserves its prompt and max_tokens
    costs = sorted(family.estimate_prompt_tokens(m) + family.MAX_TOKENS for m in items)
    tpm = profile.model_copy(update={"rpm": None, "tpm": 60_000})
    assert family.rate_floor_s(tpm, items, 100) == pytest.approx((sum(costs) - 60_000) / 1_000)


# --------------------------------------------------------------------------- adaptive limit


def _adaptive(auto: LimitRun, *fixed: LimitRun) -> Verdict:
    (verdict,) = judge_adaptive(AdaptiveFigures(tuple(fixed), auto, requests=400))
    return verdict


def test_adaptive_needs_95_percent_of_the_best_fixed_goodput() -> None:
    grid = (LimitRun(8, 10.0, 3.5), LimitRun(32, 10.5, 5.0))
    assert _adaptive(LimitRun(None, 9.98, 4.0), *grid).ok
    missed = _adaptive(LimitRun(None, 9.9, 4.0), *grid)
    assert not missed.ok and "94.3% of limit 32's" in missed.detail


def test_adaptive_is_dominated_by_a_fixed_limit_as_fast_with_a_fifth_less_p99() -> None:
    # the plateau's edge: fixed 8 has auto's goodput at half its p99
    verdict = _adaptive(LimitRun(None, 10.0, 4.0), LimitRun(8, 10.0, 2.0), LimitRun(32, 10.1, 5.0))
    assert not verdict.ok and "dominated by limit 8" in verdict.detail
    # a lower p99 at lower goodput does not dominate; 0.85× the p99 does not either
    assert _adaptive(LimitRun(None, 10.0, 4.0), LimitRun(4, 9.9, 1.0), LimitRun(8, 10.0, 3.4)).ok


def test_adaptive_leaves_out_fixed_limits_that_fail_their_calls() -> None:
    # limit 80 "wins" on goodput by failing fast: no setting anyone would run
    verdict = _adaptive(
        LimitRun(None, 10.0, 4.0), LimitRun(16, 10.2, 4.0), LimitRun(80, 30.0, 1.0, failed=300)
    )
    assert verdict.ok


def test_adaptive_shows_the_cold_start_bound_and_does_not_judge_it() -> None:
    grid = (LimitRun(64, 20.0, 3.0), LimitRun(128, 20.0, 3.2))
    auto, ramp = LimitRun(None, 12.0, 3.0), LimitRun(64, 15.0, 3.0)
    (verdict,) = judge_adaptive(AdaptiveFigures(grid, auto, 400, ramp))
    (without,) = judge_adaptive(AdaptiveFigures(grid, auto, 400))
    assert "cold-start bound 75.0%" in verdict.detail
    assert (verdict.ok, verdict.margin) == (without.ok, without.margin)


def test_auto_with_signals_is_a_second_verdict_by_the_same_rule() -> None:
    grid = (LimitRun(8, 10.0, 2.0), LimitRun(32, 10.5, 5.0))
    auto, signals = LimitRun(None, 10.0, 4.0), LimitRun(None, 10.2, 4.0)
    plain, judged = judge_adaptive(AdaptiveFigures(grid, auto, 400, signals=signals))
    assert (plain.rule, judged.rule) == ("adaptive", "adaptive+signals")
    assert plain == _adaptive(auto, *grid)  # the plain row as without the option
    assert not plain.ok and "dominated by limit 8" in plain.detail
    assert judged.ok and "97.1% of limit 32's" in judged.detail
    (summary,) = [s for s in summarise([(1, plain), (1, judged)]) if s.rule == "adaptive+signals"]
    assert (summary.held, summary.judged) == (1, 1)


def test_the_ramp_oracle_doubles_once_per_latency_straight_to_its_top() -> None:
    """The cold-start bound's limit: from 4, doubled by the first completion of a call
    admitted at the current level, never past ``top``."""
    from adaptive import RampLimit

    from gptgate.limits import Sample

    ramp = RampLimit(20)
    assert ramp.limit == 4
    ramp.update(Sample(start=0.0, latency_s=1.0, inflight=4, kind="ok"), 1.0)
    assert ramp.limit == 8
    ramp.update(Sample(start=0.5, latency_s=1.0, inflight=4, kind="ok"), 1.5)
    assert ramp.limit == 8  # admitted before the level began: the same latency
    ramp.update(Sample(start=1.0, latency_s=1.0, inflight=8, kind="dropped"), 2.0)
    assert ramp.limit == 8
    ramp.update(Sample(start=1.0, latency_s=1.0, inflight=8, kind="ok"), 2.0)
    ramp.update(Sample(start=2.0, latency_s=1.0, inflight=16, kind="ok"), 3.0)
    assert ramp.limit == 20


# --------------------------------------------------------------------------- tiers


def _tiers(**change: float) -> dict[str, Verdict]:
    figures = {"calls": 600, "auto_cost": 0.3, "large_cost": 0.6, "auto_successes": 594.0,
               "large_successes": 600.0, "escalated": 30, "in_vain": 12}
    figures.update(change)
    return _by_rule(judge_tiers(TierFigures(**figures)))  # type: ignore[arg-type]


def test_tiers_cost_at_most_all_large_at_99_percent_of_its_successes() -> None:
    assert _tiers()["tiers"].ok  # 0.5× the cost, 0.990× the successes: on the bound
    assert not _tiers(auto_successes=593.0)["tiers"].ok
    assert not _tiers(auto_cost=0.61)["tiers"].ok
    assert _tiers(auto_cost=0.6)["tiers"].ok


def test_tiers_cost_is_compared_per_answered_call() -> None:
    """Issue 31, family draw 93: everything-large left 2 of 600 calls unanswered (a 1-slot
    server refusing with 503s), auto answered all 600 (the small tier took them) and its
    bill was 1.0003× everything-large's — for 2 more answers. The rule compares the cost of
    the same job: per answered call, auto costs 0.997×."""
    assert _tiers(auto_cost=0.6003, large_cost=0.6, large_answered=598)["tiers"].ok
    assert not _tiers(auto_cost=0.6003, large_cost=0.6)["tiers"].ok  # the same work: dearer
    assert not _tiers(auto_cost=0.6, auto_answered=598)["tiers"].ok  # auto answered fewer
    assert "cost 1.00× all-large" in _tiers(auto_cost=0.6)["tiers"].detail


def test_tiers_escalations_that_changed_nothing_at_most_2_percent_of_calls() -> None:
    assert _tiers(in_vain=12)["tiers in vain"].ok  # 2.0%
    missed = _tiers(in_vain=13)["tiers in vain"]
    assert not missed.ok and "13 of 30 escalations changed nothing" in missed.detail


# --------------------------------------------------------------------------- hedging


def _hedge(stragglers: bool, p99: float, billed: int) -> Verdict:
    (verdict,) = judge_hedge(HedgeFigures(stragglers, 10.0, p99, 100_000, billed))
    return verdict


def test_hedging_with_stragglers_cuts_p99_to_07x_at_5_percent_extra() -> None:
    assert _hedge(True, 7.0, 105_000).ok
    assert not _hedge(True, 7.6, 101_000).ok  # the 0.76×
    assert not _hedge(True, 5.0, 105_100).ok


def test_hedging_without_stragglers_costs_at_most_2_percent_in_p99_and_tokens() -> None:
    assert _hedge(False, 10.2, 102_000).ok
    assert _hedge(False, 8.0, 99_000).ok  # better is no harm
    assert not _hedge(False, 10.3, 100_000).ok
    assert not _hedge(False, 10.0, 102_100).ok


def test_the_hedge_oracle_is_shown_beside_the_verdict_and_not_judged() -> None:
    def verdict(hedged: float, oracle: float) -> Verdict:
        figures = HedgeFigures(True, 10.0, hedged, 100_000, 100_000, oracle_p99_s=oracle)
        return judge_hedge(figures)[0]

    assert "[oracle 0.80×: infeasible]" in verdict(7.0, 8.0).detail
    assert verdict(7.0, 8.0).ok  # held: the oracle decides nothing
    assert not verdict(7.5, 5.0).ok and "[oracle 0.50×: feasible]" in verdict(7.5, 5.0).detail


# --------------------------------------------------------------------------- the summary


def test_summary_counts_draws_against_the_required_share_and_names_the_worst() -> None:
    verdicts = [(seed, Verdict("adaptive", True, 1.0, "")) for seed in range(19)]
    verdicts.append((42, Verdict("adaptive", False, -3.0, "worst")))
    verdicts += [(1, Verdict("hedge", True, 0.5, "")), (2, Verdict("hedge", False, -0.1, ""))]
    adaptive, hedge = summarise(verdicts)
    assert (adaptive.held, adaptive.judged, adaptive.holds) == (19, 20, True)  # 95%
    assert adaptive.worst_seed == 42 and adaptive.worst is not None
    assert (hedge.held, hedge.judged, hedge.holds, hedge.worst_seed) == (1, 2, False, 2)


def test_the_draws_a_bound_says_are_within_reach_are_counted_beside_the_rule() -> None:
    grid = (LimitRun(64, 20.0, 3.0),)
    auto = LimitRun(None, 12.0, 3.0)
    out_of_reach = judge_adaptive(AdaptiveFigures(grid, auto, 400, LimitRun(64, 15.0, 3.0)))[0]
    within_miss = judge_adaptive(AdaptiveFigures(grid, auto, 400, LimitRun(64, 19.0, 3.0)))[0]
    within_held = judge_adaptive(
        AdaptiveFigures(grid, LimitRun(None, 19.5, 3.0), 400, LimitRun(64, 19.0, 3.0)))[0]
    unbounded = judge_adaptive(AdaptiveFigures(grid, auto, 400))[0]
    assert [v.reachable for v in (out_of_reach, within_miss, within_held, unbounded)] == [
        False, True, True, None]
    hedge = judge_hedge(HedgeFigures(True, 10.0, 7.5, 100_000, 100_000, oracle_p99_s=5.0))[0]
    assert hedge.reachable is True and not hedge.ok
    calm = judge_hedge(HedgeFigures(False, 10.0, 10.0, 100_000, 100_000))[0]
    assert calm.reachable is True and calm.ok  # not hedging holds it
    (adaptive, hedged) = summarise(
        [(1, out_of_reach), (2, within_miss), (3, within_held), (4, unbounded), (5, hedge)])
    assert (adaptive.held, adaptive.judged) == (1, 4)  # the rule counts every draw
    assert (adaptive.reachable_held, adaptive.reachable) == (1, 2)
    assert (hedged.reachable_held, hedged.reachable) == (0, 1)


# --------------------------------------------------------------------------- the harness

TINY = family.Sizes(
    cache_calls=40, cache_prompts=2, cache_c=8, adaptive_requests=30, tier_calls=30,
    hedge_calls=40, hedge_c=8,
)


@pytest.mark.parametrize("judge", family.JUDGES)
def test_each_judge_runs_one_draw_end_to_end(judge: str) -> None:
    outcome = family.judge_draw(3, judge, TINY)
    assert outcome.verdicts and all(v.detail for v in outcome.verdicts)
    again = family.judge_draw(3, judge, TINY)
    assert again.figures == outcome.figures  # seeded: the same draw, the same figures


def test_adaptive_signals_adds_a_row_and_leaves_the_plain_one_as_it_was() -> None:
    plain = family.judge_draw(3, "adaptive", TINY)
    both = family.judge_draw(3, "adaptive", dataclasses.replace(TINY, adaptive_signals=True))
    assert both.figures.signals is not None and plain.figures.signals is None
    assert dataclasses.replace(both.figures, signals=None) == plain.figures
    assert [v.rule for v in both.verdicts] == ["adaptive", "adaptive+signals"]
    assert family.size_flags(dataclasses.replace(TINY, adaptive_signals=True)).endswith(
        " --adaptive-signals"
    )


def test_the_cache_judge_pools_repeats_of_the_job_on_other_engine_seeds() -> None:
    """One job's time is one long answer's luck: on family draw 7 the plain client alone took
    13.6–20.7 s over four engine seeds (jitter, answer lengths), the hand warm-up 11.2–17.2 s —
    a 5% bound judged on one of them judges the draw of the simulator. The judge pools
    ``cache_repeats`` runs per client (seeds ``seed + 10_000 × k``), as benchmarks/cache.py
    pools its repeats."""
    one = family.run_cache(family.draw(3), dataclasses.replace(TINY, cache_repeats=1))
    two = family.run_cache(family.draw(3), dataclasses.replace(TINY, cache_repeats=2))
    assert one.calls == TINY.cache_calls and two.calls == 2 * TINY.cache_calls
    assert two.plain.time_s > one.plain.time_s  # the second run's time is added
    assert two.gate.time_s > one.gate.time_s


def test_draws_are_seeded_and_differ_between_seeds() -> None:
    assert family.draw(5) == family.draw(5)
    assert len({family.draw(seed).server for seed in range(6)}) == 6


def test_the_command_prints_the_table_the_summary_and_how_to_rerun_the_worst_draw(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--draws", "2", "--seed", "7", "--only", "hedge", "--hedge-calls", "40"]
    assert family.main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("$ python benchmarks/family.py --draws 2 --seed 7 --only hedge "
                          "--hedge-calls 40")
    assert "## the draws" in out and "## hedge" in out and "## summary" in out
    assert "python benchmarks/family.py --draws 1 --seed " in out
    assert "--only hedge --hedge-calls 40" in out


def test_bad_options_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--only", "cache,speed"], ["--draws", "0"], ["--cache-calls", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            family.main(argv)
        assert exit_info.value.code == 2
    assert "--only takes cache, adaptive, tiers, hedge" in capsys.readouterr().err


def test_a_small_models_answer_to_a_hard_request_is_wrong_as_its_evidence_says() -> None:
    import _tiers

    from gptgate.results import ChatResult, Usage
    from gptgate.sim import PROFILES

    def answer(text: str, finish: str = "stop") -> ChatResult:
        return ChatResult(text, finish, "cpu", "cpu", "m", False, 1, Usage(), Usage(), None,
                          1.0, 0.0, 0.0, "default", "never")

    item = _tiers.Item("why", True, [{"role": "user", "content": "why?"}], {"max_tokens": 300})
    short = PROFILES["cpu"].model_copy(update={"output_tokens_mean": 30.0})
    for rate, complete, cut in ((1.0, 1.0, 1.0), (0.0, 0.0, 0.0)):
        model = short.model_copy(update={"hard_failure_rate": rate})
        assert _tiers.expected_wrong(answer("fine"), item, model) == pytest.approx(complete)
        assert _tiers.expected_wrong(answer("x" * 40, "length"), item, model) == pytest.approx(cut)
    half = short.model_copy(update={"hard_failure_rate": 0.5})
    assert _tiers.expected_wrong(answer(""), item, half) == 1.0
    assert _tiers.expected_wrong(answer("fine"), item, half) == pytest.approx(0.05 / 0.55)
    # answers this short are almost never cut by length: a cut one rambled
    assert _tiers.expected_wrong(answer("x" * 40, "length"), item, half) > 0.99
    # a model whose every answer runs to max_tokens: a cut says nothing beyond the prior
    fills = half.model_copy(update={"fills_max_tokens": True})
    assert _tiers.expected_wrong(answer("x", "length"), item, fills) == pytest.approx(
        0.275 / 0.775
    )
    # where the large model is cut at the same max_tokens too, a ramble is the same answer on
    # the wire as the large one (issue 31: escalating it "bought nothing"): only the silent
    # share stays wrong (0.1 × 0.5 of 0.775)
    assert _tiers.expected_wrong(answer("x", "length"), item, fills, fills) == pytest.approx(
        0.05 / 0.775
    )
    assert _tiers.expected_wrong(answer("x", "length"), item, fills, short) == pytest.approx(
        0.275 / 0.775, rel=1e-3
    )
    asks_json = _tiers.Item(
        "json", True, item.messages, {"response_format": {"type": "json_object"}}
    )
    assert _tiers.expected_wrong(answer('{"a": 1}'), asks_json, half) == 0.0
    assert _tiers.expected_wrong(answer('{"a": '), asks_json, half) > 0.99


def test_invalid_json_from_the_small_model_is_wrong_only_where_the_large_would_parse() -> None:
    """Issue 31, family draw 1077: answers of ~490 tokens against JSON requests capped at
    300-400. The large model's JSON is cut at the cap — invalid — nearly every time, and
    everything-large counts it a success; the small model's invalid JSON counted as wrong
    (0.96 each: 6.7 of the draw's 14 expected wrong answers), and escalating it bought a
    large answer that is invalid the same way (``changed_nothing``). As with a ramble cut
    like the large answer, invalid JSON is wrong only with the chance that the large model's
    would have parsed (1 − its cut rate at that cap)."""
    import _tiers

    from gptgate.results import ChatResult, Usage
    from gptgate.sim import PROFILES

    bad = ChatResult('{"a": ', "stop", "cpu", "cpu", "m", False, 1, Usage(), Usage(), None,
                     1.0, 0.0, 0.0, "default", "never")
    asks_json = _tiers.Item("json", True, [{"role": "user", "content": "list"}],
                            {"max_tokens": 300, "response_format": {"type": "json_object"}})
    small = PROFILES["cpu"].model_copy(
        update={"output_tokens_mean": 30.0, "hard_failure_rate": 0.5}
    )
    alone = _tiers.expected_wrong(bad, asks_json, small)
    assert alone > 0.99
    assert _tiers.expected_wrong(bad, asks_json, small, small) == pytest.approx(alone, rel=1e-3)
    fills = small.model_copy(update={"fills_max_tokens": True})
    assert _tiers.expected_wrong(bad, asks_json, small, fills) == 0.0
    long = small.model_copy(update={"output_tokens_mean": 490.0, "output_tokens_sigma": 0.3})
    share = 1 - _tiers.natural_cut(long, 300)
    assert _tiers.expected_wrong(bad, asks_json, small, long) == pytest.approx(alone * share)
