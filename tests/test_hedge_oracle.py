"""The oracle hedger of benchmarks/_hedge_oracle.py: the bound the family's hedge rule is read
against (a client that foresees every stall). It must really be a bound — at least as good as
gptgate's own hedging on a draw with stragglers — and really free: no stall left, no extra
token billed."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import family  # noqa: E402
import hedge  # noqa: E402
from _hedge_oracle import OracleEngine, oracle_p99  # noqa: E402

from gptgate.sim import family_draw, get_profile, run_virtual  # noqa: E402

#: a draw of the family with stragglers (4.8% of requests stall ~4.5 s) and room to hedge
STALLING_DRAW = 23


def test_the_oracle_foresees_every_stall_at_no_extra_token() -> None:
    server = get_profile("gpu").model_copy(
        update={"straggler_rate": 0.2, "straggler_s": (3.0, 3.0), "paired_draws": True}
    )
    plain = run_virtual(hedge.job, False, 100, 5, 8, 1, False, server)
    foreseen = run_virtual(hedge.job, False, 100, 5, 8, 1, False, server, 120.0, OracleEngine)
    assert plain.p99_s > 3.0  # a fifth of the calls stalled 3 s
    assert foreseen.p99_s < 3.0  # none did
    assert foreseen.billed_tokens == plain.billed_tokens  # each copy the same answer


def test_a_server_that_stalls_everything_still_answers_through_the_oracle() -> None:
    server = get_profile("gpu").model_copy(
        update={"straggler_rate": 1.0, "straggler_s": (0.5, 0.5), "paired_draws": True}
    )
    run = run_virtual(hedge.job, False, 10, 5, 4, 1, False, server, 120.0, OracleEngine)
    assert run.failed == 0


def test_the_oracle_is_at_least_as_good_as_gptgates_hedging_on_a_seeded_draw() -> None:
    d = family_draw(STALLING_DRAW)
    assert d.server.straggler_rate > 0.04
    server = d.server.model_copy(update={"paired_draws": True})
    c = min(32, d.server.replicas * d.server.slots)
    plain, hedged = (
        run_virtual(hedge.job, on, 200, d.seed, c, 1, False, server, 3600.0)
        for on in (False, True)
    )
    oracle = oracle_p99(server, 200, d.seed, c, 3600.0, plain.billed_tokens)
    assert oracle <= hedged.p99_s
    assert oracle < 0.5 * plain.p99_s


def test_the_family_shows_the_oracle_beside_the_hedge_verdict() -> None:
    sizes = family.Sizes(hedge_calls=60, hedge_c=8)
    outcome = family.judge_draw(STALLING_DRAW, "hedge", sizes)
    assert outcome.figures.oracle_p99_s is not None
    (verdict,) = outcome.verdicts
    assert "[oracle " in verdict.detail
