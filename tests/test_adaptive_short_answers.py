"""``concurrency="auto"`` where a non-streamed call's fixed part (prefill, first token, network)
is far more than the 20 decode tokens ``LatencyNormaliser`` guesses for it (issue 31, the
family's goodput misses under a feasible cold-start bound; docs/adaptive.md, "Issue 31, round
9"). Such a call is priced at the reference answer length as ``latency·(K + n0)/(n + n0)``:
with ``n0`` guessed at 20 where it is ~140, a short answer is priced ~3× slower than it was.
Slow start's first completions at a doubled level are the short answers, so a doubling that
bought 0.71 of its calls in goodput read as 0.05 and slow start ended at 4 on a 16-slot server.

The fixed part is now fitted from the calls' latencies and lengths
(gptgate/limits/overhead_fit.py). Priced right, the plateau's doubling into a half-formed
queue no longer reads as bought nothing; slow start ends there on the queue itself, read from
the rise of the calls' fixed part (tests/test_limits_overhead_fit.py). Virtual time, draws of
the server family, benchmarks/adaptive.py's job (~2 s of CPU each)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import adaptive

from gptgate.limits.base import Sample
from gptgate.limits.normalise import LatencyNormaliser
from gptgate.sim import family, run_virtual


def _sample(latency_s: float, tokens: int) -> Sample:
    return Sample(start=0.0, latency_s=latency_s, inflight=4, kind="ok", output_tokens=tokens)


def test_a_short_answer_is_priced_like_a_long_one_under_the_same_load() -> None:
    # 0.8 s of fixed part and 5.7 ms a token (family draw 1080's calls): an 18-token answer
    # takes 0.90 s, a 400-token one 3.08 s — the same load, so the same price at the reference
    # length. With the fixed part guessed at 20 tokens the short one is priced 3.1× the long one
    norm = LatencyNormaliser()
    for n in [313, 400, 400, 400, 142, 70, 116, 43, 134, 18, 327, 58, 391, 219, 400]:
        norm(_sample(0.8 + 0.0057 * n, n))
    short, long = norm(_sample(0.8 + 0.0057 * 18, 18)), norm(_sample(0.8 + 0.0057 * 400, 400))
    assert short == pytest.approx(long, rel=0.05), (short, long)


@pytest.mark.parametrize(
    ("draw", "best"),
    [
        # 1 × 16 slots (tpu), a queue of 22 then 503, answers of 18-400 tokens: the doubling
        # 4 → 8 read an elasticity of 0.05 (the fixed grid: 0.71); 53% of fixed 16's goodput
        (1080, 16),
        # 1 × 15 slots (tpu/llama), a queue of 16 then 429: 8 → 16 read 0.25 (the grid: 0.56);
        # the centre 9.5 for 15 slots, 77% of fixed 15's goodput
        (1016, 15),
    ],
)
def test_auto_reaches_the_slots_where_short_answers_finish_first(draw: int, best: int) -> None:
    server = family(draw)
    fixed = run_virtual(adaptive.run_row, server, best, 400, draw, None, None, 3600.0)
    auto = run_virtual(adaptive.run_row, server, None, 400, draw, None, None, 3600.0)
    assert auto.failed == 0
    assert auto.goodput >= 0.95 * fixed.goodput, (auto.goodput, fixed.goodput)
