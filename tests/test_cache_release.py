"""Whether the ramp pays on a backend (issue 31, gptgate/cache_release.py).

On a server with prefix-affine routing (a call goes to its prefix's home replica while that
has a free slot) whose replicas slow down past a few calls, the ramp, the shares and the
pacing keep each warm prefix on its home replica: the hits it protects share one decode batch
and take longer than the misses that went elsewhere. Family draw 98's shape (9 replicas × 15
slots, knee 9, answers that fill ``max_tokens``): the gate's hits took 34 s, its misses 16 s,
and the job 1.21× the plain client's time at a higher hit rate. The gate now measures that
from its own calls and releases warm prefixes to the whole limit there.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gptgate.cache_release import MEMORY_S, MIN_HITS, MIN_MISSES, ReleaseJudge
from gptgate.sim import SimProfile, get_profile, run_virtual
from tests.test_cache_spread import gate, job

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from _strategies import run_naive  # the plain client of benchmarks/family.py

LIMIT = 64


def knee_server() -> SimProfile:
    """Family draw 98's server (benchmarks/family.py --seed 98), its knobs written out."""
    return get_profile("spread").model_copy(
        update={
            "name": "affine-knee",
            "replicas": 9,
            "slots": 15,
            "max_queue": None,
            "prefix_overflow_rpm": None,
            "spread_in_flight": None,
            "ttft_overhead_s": 0.268,
            "prefill_tokens_per_s": 8289.0,
            "base_step_s": 0.0108,
            "usl_sigma": 0.0139,
            "usl_kappa": 0.0130,
            "jitter_sigma": 0.254,
            "load_jitter_sigma": 0.511,
            "straggler_rate": 0.0,
            "output_tokens_mean": 164.0,
            "output_tokens_sigma": 0.274,
            "fills_max_tokens": True,
            "cache_ttl_s": 11.4,
            "cache_max_blocks": 367,
        }
    )


def test_the_gate_is_not_slower_than_a_plain_client_where_its_hits_cost_time() -> None:
    """Issue 31's floor (never worse than the plain client by 10% of time) on draw 98's
    shape. Before: 88.1% hits in 256.6 s against the plain client's 73.0% in 228.4 s (1.12×);
    now 82.0% in 199.9 s (0.88×)."""
    profile = knee_server()
    items = job(seed=7, calls=400)
    plain = run_virtual(run_naive, profile, [items], LIMIT, 7)
    plain_hit, plain_s = plain.hit, plain.total_s
    gate_hit, gate_s = run_virtual(gate, profile, items, 7)
    assert gate_hit >= plain_hit - 0.05, (gate_hit, plain_hit)
    assert gate_s <= 1.10 * plain_s, (gate_s, plain_s)


def test_hits_slower_than_misses_release_the_backend_for_a_while() -> None:
    judge = ReleaseJudge()
    for _ in range(MIN_HITS):
        assert not judge.record("b", hit=True, latency_s=3.0, now=0.0)
    for k in range(MIN_MISSES - 1):
        assert not judge.record("b", hit=False, latency_s=1.0, now=float(k))
    assert not judge.released("b", 10.0)  # one kind not measured enough yet
    assert judge.record("b", hit=False, latency_s=1.0, now=10.0)
    assert judge.released("b", 10.0) and not judge.released("other", 10.0)
    assert not judge.released("b", 10.0 + MEMORY_S)  # judged again on fresh calls


@pytest.mark.parametrize("hit_s", [1.0, 1.3])
def test_hits_that_save_time_or_cost_little_keep_the_ramp(hit_s: float) -> None:
    """Hits as fast as misses, or a little slower (a warm replica's fuller batch: the named
    profiles' cold bursts on ``overflow``, 1.26×), keep the ramp."""
    judge = ReleaseJudge()
    for k in range(10 * MIN_HITS):
        judge.record("b", hit=True, latency_s=hit_s, now=float(k))
        judge.record("b", hit=k % 4 != 0, latency_s=1.0, now=float(k))
    assert not judge.released("b", 10.0 * MIN_HITS)
