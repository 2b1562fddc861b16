"""Simulator profiles: every knob of the serving-stack model, and the named presets.

A profile is data, not code, so that a test or a benchmark can derive a variant with
``PROFILES["gpu"].model_copy(update={"slots": 4})`` instead of subclassing the engine. The
numbers are *shapes* (the field data in docs/background.md), never constants to assert on:
tests compare profiles with each other, not with these values.

Timing model (all in simulated seconds):

* a request waits for one of ``slots`` running sequences on its replica (FIFO queue of
  ``max_queue``; ``None`` = unbounded, like llama.cpp);
* once running with ``b`` sequences on the replica, it pays
  ``ttft_overhead_s + uncached_prompt / prefill_tokens_per_s × usl(b)`` before its first token and
  ``step_time(b)`` per output token, where ``usl(b) = 1 + σ(b−1) + κ·b(b−1)`` is the Universal
  Scalability Law: aggregate decode throughput ``b / step_time(b)`` rises, flattens, then falls
  past ``knee``;
* a small lognormal jitter (larger under load with ``load_jitter_sigma``) spreads latencies;
* a ``straggler_rate`` share of requests stalls ``straggler_s`` before it even joins the queue.
"""

from __future__ import annotations

import importlib
import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["DIALECT_PROFILES", "PROFILES", "SimProfile", "get_profile"]


class SimProfile(BaseModel):
    """The knobs of one simulated backend. Frozen: derive variants with ``model_copy``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    model: str
    hardware: Literal["tpu", "gpu", "cpu"]
    #: wire dialect: "openai" (hosted/vLLM-like), "llamacpp" (llama-server quirks),
    #: "azure" (Azure OpenAI's paths, ``api-key`` auth and headers: gptgate/sim/azure.py),
    #: "anthropic" (the Messages API, caching only at cache_control markers:
    #: gptgate/sim/anthropic.py) or "deepseek" (its top-level cache usage, usage on the last
    #: stream chunk, Bearer auth checked)
    flavor: Literal["openai", "llamacpp", "azure", "anthropic", "deepseek"] = "openai"
    #: ``/v1/embeddings`` (gptgate/sim/embeddings.py): the most inputs a request may carry
    #: (a 400 beyond), the vector's size, and the time of one request: a fixed part plus a
    #: small part per input (a GPU embeds a batch nearly as fast as one text; the request's
    #: round trip and scheduling are what it pays per request)
    embedding_max_inputs: int = Field(default=2048, ge=1)
    #: the most tokens one input may hold (OpenAI's embedding models: 8,192): a request with
    #: a longer one is a 400 for the whole request, as OpenAI answers it; None: no limit
    embedding_max_input_tokens: int | None = Field(default=8192, ge=1)
    embedding_dimensions: int = Field(default=8, ge=1)
    embedding_request_s: float = Field(default=0.02, ge=0)
    embedding_per_input_s: float = Field(default=0.00002, ge=0)
    #: the key the server expects in its dialect's header (Azure: ``api-key``); None: any
    #: non-empty one (a request without the header is refused either way on "azure")
    api_key: str | None = None
    #: bearer tokens (Entra ID) an "azure" server accepts; empty: any JWT-shaped token
    bearer_tokens: tuple[str, ...] = ()

    # -- capacity ------------------------------------------------------------------------
    replicas: int = Field(1, ge=1)
    #: concurrent sequences per replica (continuous-batching slots)
    slots: int = Field(16, ge=1)
    #: waiting requests per replica; None = unbounded (never rejects)
    max_queue: int | None = Field(64, ge=0)
    #: status when the queue is full: 429 (hosted-like) or 503 (self-hosted-like)
    queue_full_status: Literal[429, 503] = 503
    queue_retry_after_s: float = Field(1.0, ge=0)
    context_tokens: int = Field(128_000, ge=1)

    # -- timing --------------------------------------------------------------------------
    ttft_overhead_s: float = Field(0.1, ge=0)
    prefill_tokens_per_s: float = Field(10_000.0, gt=0)
    base_step_s: float = Field(0.01, gt=0)
    usl_sigma: float = Field(0.01, ge=0, lt=1)
    usl_kappa: float = Field(0.0001, ge=0)
    jitter_sigma: float = Field(0.1, ge=0)
    #: extra jitter sigma at full load, scaled by (batch/slots)²: the P99 tail of a busy GPU
    load_jitter_sigma: float = Field(0.0, ge=0)
    #: share of requests that stall before being scheduled (a slow balancer hop, a request
    #: parked on a busy front end): each waits a uniform draw from ``straggler_s`` (lo, hi)
    #: seconds before it joins its replica's queue, holding no slot. Drawn per arrival, so a
    #: hedge of a stalled request is a fresh draw (Dean & Barroso's "tail at scale")
    straggler_rate: float = Field(0.0, ge=0, le=1)
    straggler_s: tuple[float, float] = (1.0, 1.0)
    #: draw each request's stall and jitter from its own seeded stream, keyed by its body and
    #: how many times that body came before (a duplicate or a retry is a fresh draw), not in
    #: arrival order from one stream: two runs of one job that differ by a few requests (a
    #: hedge's duplicates) then meet the same stalls and jitter on every other request — a
    #: paired comparison (benchmarks/hedge.py --paired). Off: every named profile unchanged
    paired_draws: bool = False
    #: probability (at full load) that a running request fails part-way (5xx / cut stream)
    overload_error_rate: float = Field(0.0, ge=0, le=1)
    #: load (batch / slots) from which overload failures start, ramping to the rate at 1.0
    overload_from: float = Field(0.75, ge=0, lt=1)

    # -- output --------------------------------------------------------------------------
    output_tokens_mean: float = Field(215.0, gt=0)
    output_tokens_sigma: float = Field(0.6, ge=0)
    output_tokens_max: int = Field(4096, ge=1)
    #: SSE writes per streamed response (each carries several tokens' text)
    stream_chunks: int = Field(16, ge=1)
    #: a non-streamed answer whose client hung up is generated to its end anyway (its slot
    #: busy, all of it billed), as llama-server does (docs/guide/deadlines.md); a stream stops
    finishes_abandoned: bool = False
    #: a model that talks past any cap: with ``max_tokens`` set, every answer runs to it and
    #: ends with ``finish_reason="length"`` (without ``max_tokens``, its natural length)
    fills_max_tokens: bool = False
    #: share of the requests marked ``x-sim-difficulty: hard`` this model gets wrong (a small
    #: model; see gptgate/sim/difficulty.py). 0 = it answers everything well
    hard_failure_rate: float = Field(0.0, ge=0, le=1)

    # -- rate limits (None = no limit and no x-ratelimit-* headers) ------------------------
    rpm: int | None = Field(None, ge=1)
    #: the window RPM is enforced over: a full minute's budget at once (OpenAI), or Azure's
    #: 1 s / 10 s windows (600 RPM → 10 requests a second, never 600 in a burst)
    rpm_window_s: float = Field(60.0, gt=0, le=60)
    tpm: int | None = Field(None, ge=1)
    #: tokens a request without max_tokens reserves against TPM, on top of its prompt
    tpm_default_max_tokens: int = Field(1024, ge=0)

    # -- prefix cache (OpenAI rules) -----------------------------------------------------
    cache_min_tokens: int = Field(1024, ge=1)
    cache_block_tokens: int = Field(128, ge=1)
    cache_ttl_s: float = Field(300.0, gt=0)
    #: a hit makes an entry young again (OpenAI's and Anthropic's idle lifetimes); False: an
    #: entry expires ``cache_ttl_s`` after it was written, however often it is hit
    cache_refresh_on_hit: bool = True
    #: LRU bound per replica, in blocks
    cache_max_blocks: int = Field(65_536, ge=1)
    #: routing hashes about this many leading tokens (plus prompt_cache_key)
    prefix_route_tokens: int = Field(256, ge=1)
    #: per-prefix requests/minute one replica takes before traffic spreads; None = never
    prefix_overflow_rpm: float | None = Field(None, gt=0)
    #: a hot prefix spreads to other replicas once this many of its calls run on its home
    #: replica (routed there, not finished: the least-loaded other replica takes the next
    #: one, its cache cold; gptgate/sim/spread.py); None = never
    spread_in_flight: int | None = Field(None, ge=1)
    #: KV-cache budget per replica, in blocks of ``cache_block_tokens``: running sequences
    #: hold blocks for prompt + output, the prefix cache lives in the blocks they leave free
    #: (LRU). None = no KV pressure: the prefix cache is bounded by ``cache_max_blocks`` only
    kv_blocks: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _check(self) -> SimProfile:
        if self.cache_min_tokens % self.cache_block_tokens:
            raise ValueError("cache_min_tokens must be a multiple of cache_block_tokens")
        low, high = self.straggler_s
        if not (0 <= low <= high and math.isfinite(high)):
            raise ValueError("straggler_s must be (low, high) seconds with 0 <= low <= high")
        return self

    @property
    def kv_tokens(self) -> int | None:
        """The KV budget per replica in tokens (None without one)."""
        return None if self.kv_blocks is None else self.kv_blocks * self.cache_block_tokens

    def usl(self, batch: int) -> float:
        """Slow-down factor of one step at ``batch`` running sequences (1.0 when alone)."""
        b = max(1, batch)
        return 1.0 + self.usl_sigma * (b - 1) + self.usl_kappa * b * (b - 1)

    def step_time(self, batch: int) -> float:
        """Seconds per decode step with ``batch`` sequences running on one replica."""
        return self.base_step_s * self.usl(batch)

    @property
    def knee(self) -> float:
        """Batch size of peak aggregate throughput, √((1−σ)/κ) (∞ without contention)."""
        if self.usl_kappa == 0:
            return math.inf
        return math.sqrt((1.0 - self.usl_sigma) / self.usl_kappa)


_HOSTED = SimProfile(
    name="hosted",
    model="gpt-5.5",
    hardware="tpu",
    replicas=4,
    slots=16,
    max_queue=6,
    queue_full_status=429,
    queue_retry_after_s=1.0,
    context_tokens=400_000,
    ttft_overhead_s=0.25,
    prefill_tokens_per_s=25_000.0,
    base_step_s=0.0072,
    usl_sigma=0.015,
    usl_kappa=0.0055,
    jitter_sigma=0.12,
    load_jitter_sigma=0.1,
    overload_error_rate=0.16,
    overload_from=0.8,
    output_tokens_sigma=0.4,
    rpm=10_000,
    tpm=10_000_000,
    prefix_overflow_rpm=15.0,
    # 49,152 KV tokens per replica: its 16 slots × ~2k-token sequences plus half as much again,
    # the HBM left after the weights (idle prefixes get what the running batch leaves)
    kv_blocks=384,
)

_TPU = SimProfile(
    name="tpu",
    model="gpt-5.5",
    hardware="tpu",
    slots=128,
    max_queue=256,
    queue_full_status=503,
    ttft_overhead_s=0.35,
    prefill_tokens_per_s=30_000.0,
    base_step_s=0.0085,
    usl_sigma=0.002,
    usl_kappa=0.00004,
    jitter_sigma=0.08,
    load_jitter_sigma=0.1,
    # 98,304 KV tokens: a v5e-8 slice (128 GB HBM) holding a 70B-class model in int8 keeps
    # ~30 GB for KV at ~320 KB per token
    kv_blocks=768,
)

_GPU = SimProfile(
    name="gpu",
    model="gpt-5.5",
    hardware="gpu",
    slots=32,
    max_queue=256,
    queue_full_status=503,
    ttft_overhead_s=0.04,
    prefill_tokens_per_s=15_000.0,
    base_step_s=0.008,
    usl_sigma=0.015,
    usl_kappa=0.0006,
    jitter_sigma=0.2,
    load_jitter_sigma=0.7,
)

_CPU = SimProfile(
    name="cpu",
    model="qwen2.5-1.5b-instruct-q4_k_m",
    hardware="cpu",
    slots=4,
    max_queue=32,
    queue_full_status=503,
    context_tokens=32_768,
    ttft_overhead_s=0.08,
    prefill_tokens_per_s=600.0,
    base_step_s=0.04,
    usl_sigma=0.08,
    usl_kappa=0.03,
    jitter_sigma=0.15,
    # a 1.5B model: it gets the hard requests wrong (tiered serving, docs/tiers.md)
    hard_failure_rate=1.0,
)

_LLAMACPP = SimProfile(
    name="llamacpp",
    model="llama-3.1-8b-instruct-q4_k_m.gguf",
    hardware="gpu",
    flavor="llamacpp",
    slots=4,
    max_queue=None,
    context_tokens=32_768,
    ttft_overhead_s=0.03,
    prefill_tokens_per_s=4_000.0,
    base_step_s=0.012,
    usl_sigma=0.05,
    usl_kappa=0.01,
    jitter_sigma=0.1,
    finishes_abandoned=True,
)

# A smaller GPU (an L4-class card): the same software, a much lower hidden knee.
_GPU_SMALL = _GPU.model_copy(
    update={
        "name": "gpu-small",
        "slots": 12,
        "max_queue": 48,
        "base_step_s": 0.011,
        "usl_sigma": 0.03,
        "usl_kappa": 0.004,
        "load_jitter_sigma": 0.5,
    }
)

# A hosted account on a low usage tier: plenty of capacity behind it, but an RPM limit far
# below it, so the binding constraint is the rate limit, not the server (429s, not queueing).
_TIER1 = _TPU.model_copy(
    update={
        "name": "tier1",
        "rpm": 300,
        "tpm": 2_000_000,
        "replicas": 1,
        "max_queue": 512,
        "queue_full_status": 429,
    }
)

# A hosted API that spreads a hot prefix over many replicas, each with a short-lived cache
# (issue 14): above 15 requests/minute for one prefix, traffic spreads over up to eight
# replicas, and a copy not hit for ``cache_ttl_s`` is gone. A prefix run slowly lands on a
# few replicas rarely enough that their copies expire between uses.
_SPREAD = _HOSTED.model_copy(
    update={
        "name": "spread",
        "replicas": 8,
        "max_queue": 128,
        "overload_error_rate": 0.0,
        "cache_ttl_s": 5.0,
        "kv_blocks": None,
    }
)

# A server of hidden capacity whose throughput is flat from 8 to 32 calls at once (issue 14,
# tried on a server no one on the team wrote): 8 sequences decode at a time and the rest wait
# in its queue, so past 8 extra concurrency buys no goodput, only queueing latency. The knee
# rule must settle on the smallest limit that holds the plateau's goodput, not inside it.
_PLATEAU = _GPU.model_copy(
    update={
        "name": "plateau",
        "slots": 8,
        "max_queue": 256,
        "ttft_overhead_s": 0.03,
        "base_step_s": 0.0022,
        "usl_sigma": 0.01,
        # a knee (~100) far above its 8 slots: the plateau is the queue's, not the batch's
        "usl_kappa": 0.0001,
        "jitter_sigma": 0.1,
        "load_jitter_sigma": 0.0,
    }
)

PROFILES: dict[str, SimProfile] = {
    p.name: p
    for p in (
        _HOSTED,
        _TPU,
        _GPU,
        _CPU,
        _LLAMACPP,
        _GPU_SMALL,
        _TIER1,
        _SPREAD,
        _PLATEAU,
    )
}


#: the dialect flavors' presets, defined beside their engines and imported on first use
#: (``gptgate sim serve --profile anthropic``; ``SimEngine("deepseek")``)
DIALECT_PROFILES = {
    "anthropic": "gptgate.sim.anthropic:ANTHROPIC_PROFILE",
    "azure": "gptgate.sim.azure:AZURE_PROFILE",
    "deepseek": "gptgate.sim.deepseek:DEEPSEEK_PROFILE",
}


def get_profile(name: str) -> SimProfile:
    """The preset called ``name``; a ``KeyError`` lists the known names."""
    if name in DIALECT_PROFILES:
        module, _, attr = DIALECT_PROFILES[name].partition(":")
        profile: SimProfile = getattr(importlib.import_module(module), attr)
        return profile
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted([*PROFILES, *DIALECT_PROFILES]))
        raise KeyError(f"unknown simulator profile {name!r}; known: {known}") from None
