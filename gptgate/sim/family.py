"""A seeded family of simulated servers: every knob drawn from a range real servers span.

Why: a capability judged on the named profiles (``gptgate.sim.PROFILES``) is judged on nine
points; each of issue 31's failures passed on a named profile and failed on a shape next to
it. :func:`family` draws a whole server shape from a seed instead, so a benchmark can judge a
promise on a hundred shapes and name the seed of the worst one to rerun it alone.

* ``family(seed) -> SimProfile`` — one server (the large model: it answers every request);
* ``family_draw(seed) -> FamilyDraw`` — that server, a small-model tier drawn beside it (for
  tiered serving: faster, cheaper, wrong on a share of the hard requests) and the length of
  one typical call on the server, the unit of its cache lifetime.

Each knob has its own seeded stream (``Random(f"family:{seed}:{knob}")``), so adding a knob
later leaves every other knob of every seed where it was. The ranges are the module constants
below; docs/guide/simulator.md ("The server family") says why each is plausible.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from gptgate.sim.profiles import SimProfile

__all__ = [
    "CACHE_LIFETIME_CALLS",
    "CACHE_TOKENS",
    "CONTEXT_TOKENS",
    "DECODE_STEP_S",
    "HARDWARE",
    "HARD_FAILURE_RATE",
    "JITTER_SIGMA",
    "KNEE_PER_SLOT",
    "LOAD_JITTER_SIGMA",
    "OUTPUT_TOKENS_MEAN",
    "OUTPUT_TOKENS_SIGMA",
    "PREFILL_TOKENS_PER_S",
    "QUEUE_PER_SLOT",
    "REPLICAS",
    "RPM",
    "SLOTS",
    "SPREAD_IN_FLIGHT",
    "STRAGGLER_RATE",
    "STRAGGLER_S",
    "TPM",
    "TTFT_OVERHEAD_S",
    "USL_SIGMA",
    "FamilyDraw",
    "Hardware",
    "call_latency_s",
    "family",
    "family_draw",
]

# -- the ranges (inclusive); "log" ones are drawn uniformly in log space ----------------------
REPLICAS = (1, 16)  # log
SLOTS = (1, 64)  # log, within the hardware's own range (HARDWARE)
#: a bounded queue's length per slot (at least 1 waiting request), when the draw bounds it
QUEUE_PER_SLOT = (0.25, 8.0)  # log
#: calls of one prefix in flight on its home replica before it spreads (or never: None)
SPREAD_IN_FLIGHT = (1, 32)  # log
#: cache lifetime, in typical call latencies (:func:`call_latency_s`)
CACHE_LIFETIME_CALLS = (0.5, 1000.0)  # log
#: prefix-cache capacity per replica, in tokens
CACHE_TOKENS = (16_384, 8_388_608)  # log
PREFILL_TOKENS_PER_S = (300.0, 50_000.0)  # log, within the hardware's range
#: seconds per decode step alone on a replica (250 down to 12.5 tokens/s)
DECODE_STEP_S = (0.004, 0.08)  # log, within the hardware's range
TTFT_OVERHEAD_S = (0.02, 0.4)  # log, within the hardware's range
USL_SIGMA = (0.0, 0.1)
#: where throughput peaks (the USL knee), as a multiple of the slots, when it falls at all
#: (one draw in six has no coherency cost, κ = 0); κ = (1 − σ) / knee², knee ≥ 2
KNEE_PER_SLOT = (0.5, 16.0)  # log
JITTER_SIGMA = (0.05, 0.3)
LOAD_JITTER_SIGMA = (0.0, 0.8)
#: share of requests that stall before being scheduled, and how long (seconds)
STRAGGLER_RATE = (0.0, 0.05)
STRAGGLER_S = (0.5, 5.0)
RPM = (60, 10_000)  # log
TPM = (40_000, 10_000_000)  # log
OUTPUT_TOKENS_MEAN = (20.0, 800.0)  # log
OUTPUT_TOKENS_SIGMA = (0.2, 1.0)
CONTEXT_TOKENS = (16_384, 32_768, 131_072, 400_000)
#: the small tier's share of hard requests it gets wrong
HARD_FAILURE_RATE = (0.2, 1.0)


@dataclass(frozen=True, slots=True)
class Hardware:
    """What one kind of accelerator allows: its slots, prefill and decode speed, overhead."""

    slots: tuple[int, int]
    prefill_tokens_per_s: tuple[float, float]
    decode_step_s: tuple[float, float]
    ttft_overhead_s: tuple[float, float]


#: per hardware, inside the global ranges above (docs/background.md, "Hardware types")
HARDWARE: dict[str, Hardware] = {
    # llama.cpp / a 1-3B quantised model on cores: few slots, slow prefill, 12-33 tokens/s
    "cpu": Hardware((1, 8), (300.0, 3_000.0), (0.03, 0.08), (0.05, 0.4)),
    # one card, llama-server (-np 1..) to vLLM (--max-num-seqs 64): the widest spread
    "gpu": Hardware((1, 64), (1_500.0, 20_000.0), (0.006, 0.04), (0.02, 0.2)),
    # a slice batching wide: fast prefill and decode, a slower first token (scheduling)
    "tpu": Hardware((8, 64), (8_000.0, 50_000.0), (0.004, 0.012), (0.1, 0.4)),
}

#: the typical call that sets the cache lifetime's unit: a prompt at the cache minimum of
#: OpenAI's rules, uncached, and a mean-length answer, alone on a replica
_CALL_PROMPT_TOKENS = 1024
#: a running sequence's KV footprint when the family models KV pressure (prompt + answer)
_SEQUENCE_TOKENS = 2048


@dataclass(frozen=True, slots=True)
class FamilyDraw:
    """One draw of the family: the server, a small tier beside it, and its call length."""

    seed: int
    #: the server (a large model: ``hard_failure_rate`` 0); the same as ``family(seed)``
    server: SimProfile
    #: a small model on the same kind of server: 2–6× faster prefill, a decode step 0.2–0.6×
    #: as long, wrong on ``hard_failure_rate`` of the hard requests, a context of 16k–32k
    small: SimProfile
    #: :func:`call_latency_s` of ``server``: the cache lifetime is ``cache_calls`` of these
    call_s: float
    cache_calls: float


def call_latency_s(profile: SimProfile) -> float:
    """Seconds of one typical call alone on a replica: the overhead, a 1,024-token prompt's
    prefill uncached, and a mean-length answer's decode (no jitter)."""
    return (
        profile.ttft_overhead_s
        + _CALL_PROMPT_TOKENS / profile.prefill_tokens_per_s
        + profile.output_tokens_mean * profile.base_step_s
    )


def family(seed: int) -> SimProfile:
    """The server of draw ``seed``, named ``family-<seed>``: same seed, same server."""
    return family_draw(seed).server


def family_draw(seed: int) -> FamilyDraw:
    """Draw ``seed`` of the family: the server, its small tier and its call length."""
    d = _Draws(seed)
    hardware = d.pick("hardware", tuple(HARDWARE))
    hw = HARDWARE[hardware]
    flavor = "llamacpp" if d.chance("flavor", 0.3) else "openai"
    queue = d.pick("queue", ("unbounded", 429, 503))
    hosted_cache = d.chance("cache_rules", 0.6)  # OpenAI's 1,024/128 rules, else vLLM's 16
    block = 128 if hosted_cache else 16
    slots = d.log_int("slots", *hw.slots)
    sigma = d.uniform("usl_sigma", *USL_SIGMA)
    knee = max(2.0, slots * d.log_uniform("knee", *KNEE_PER_SLOT))
    knobs: dict[str, Any] = {
        "name": f"family-{seed}",
        "model": "family-large",
        "hardware": hardware,
        "flavor": flavor,
        "finishes_abandoned": flavor == "llamacpp",
        "replicas": d.log_int("replicas", *REPLICAS),
        "slots": slots,
        "max_queue": None if queue == "unbounded"
        else max(1, round(slots * d.log_uniform("queue_len", *QUEUE_PER_SLOT))),
        "queue_full_status": 503 if queue == "unbounded" else queue,
        "context_tokens": d.pick("context", CONTEXT_TOKENS),
        "ttft_overhead_s": d.log_uniform("ttft_overhead", *hw.ttft_overhead_s),
        "prefill_tokens_per_s": d.log_uniform("prefill", *hw.prefill_tokens_per_s),
        "base_step_s": d.log_uniform("decode", *hw.decode_step_s),
        "usl_sigma": sigma,
        "usl_kappa": 0.0 if d.chance("no_kappa", 1 / 6) else (1.0 - sigma) / (knee * knee),
        "jitter_sigma": d.uniform("jitter", *JITTER_SIGMA),
        "load_jitter_sigma": d.uniform("load_jitter", *LOAD_JITTER_SIGMA),
        "straggler_rate": 0.0 if d.chance("no_stragglers", 0.4)
        else d.uniform("straggler_rate", *STRAGGLER_RATE),
        "straggler_s": tuple(sorted(d.uniform(f"straggler_s{i}", *STRAGGLER_S) for i in (0, 1))),
        "output_tokens_mean": d.log_uniform("output_mean", *OUTPUT_TOKENS_MEAN),
        "output_tokens_sigma": d.uniform("output_sigma", *OUTPUT_TOKENS_SIGMA),
        "fills_max_tokens": d.chance("fills", 0.25),
        "cache_block_tokens": block,
        "cache_min_tokens": 1024 if hosted_cache else block,
        "cache_max_blocks": d.log_int("cache_tokens", *CACHE_TOKENS) // block,
        "cache_refresh_on_hit": d.chance("refresh", 0.7),
        "kv_blocks": math.ceil(slots * _SEQUENCE_TOKENS * d.uniform("kv", 1.25, 4.0) / block)
        if d.chance("kv_pressure", 0.3)
        else None,
    }
    knobs.update(_rate_limits(d))
    knobs["spread_in_flight"] = (
        None if d.chance("never_spreads", 0.3) else d.log_int("spread", *SPREAD_IN_FLIGHT)
    )
    base = SimProfile(**knobs, cache_ttl_s=1.0)
    call_s = call_latency_s(base)
    cache_calls = d.log_uniform("cache_lifetime", *CACHE_LIFETIME_CALLS)
    server = base.model_copy(update={"cache_ttl_s": cache_calls * call_s})
    small = server.model_copy(
        update={
            "name": f"family-{seed}-small",
            "model": "family-small",
            "prefill_tokens_per_s": server.prefill_tokens_per_s * d.uniform("small_prefill", 2, 6),
            "base_step_s": server.base_step_s * d.uniform("small_decode", 0.2, 0.6),
            "context_tokens": d.pick("small_context", CONTEXT_TOKENS[:2]),
            "hard_failure_rate": d.uniform("hard_failure", *HARD_FAILURE_RATE),
            "fills_max_tokens": d.chance("small_fills", 0.25),
        }
    )
    return FamilyDraw(seed, server, small, call_s, cache_calls)


def _rate_limits(d: _Draws) -> dict[str, int | None]:
    """None half the time; else an RPM limit, a TPM limit, or both (a hosted usage tier)."""
    if d.chance("no_limits", 0.5):
        return {"rpm": None, "tpm": None}
    which = d.pick("limits", ("rpm", "tpm", "both"))
    return {
        "rpm": d.log_int("rpm", *RPM) if which != "tpm" else None,
        "tpm": d.log_int("tpm", *TPM) if which != "rpm" else None,
    }


class _Draws:
    """Seeded draws, one independent stream per knob name."""

    __slots__ = ("_seed",)

    def __init__(self, seed: int) -> None:
        self._seed = seed

    def _rng(self, knob: str) -> random.Random:
        return random.Random(f"family:{self._seed}:{knob}")

    def uniform(self, knob: str, low: float, high: float) -> float:
        return self._rng(knob).uniform(low, high)

    def log_uniform(self, knob: str, low: float, high: float) -> float:
        return math.exp(self._rng(knob).uniform(math.log(low), math.log(high)))

    def log_int(self, knob: str, low: int, high: int) -> int:
        """An integer in [low, high], uniform in log space (each end gets its share)."""
        x = math.exp(self._rng(knob).uniform(math.log(low), math.log(high + 1)))
        return min(high, max(low, math.floor(x)))

    def chance(self, knob: str, p: float) -> bool:
        return self._rng(knob).random() < p

    def pick(self, knob: str, options: tuple[Any, ...]) -> Any:
        return self._rng(knob).choice(options)
