"""The simulator's load reports, in the self-hosted servers' own formats.

``GET /metrics`` answers in vLLM's names, both generations (``vllm:kv_cache_usage_perc`` and
the deprecated ``vllm:gpu_cache_usage_perc``), and ``GET /slots`` / ``/props`` as llama.cpp's
server does, all from the scheduler's real state at that instant: what ``Backend(signals=
True)`` reads (gptgate/signals.py) is what the engine is doing, so tests and benchmarks of
signal-driven limits and routing run without a GPU.

A server of several replicas behind one URL reports what such a deployment does:

* the ``openai`` flavor is vLLM with ``--data-parallel-size N``: one API server in front of
  N engines, whose ``/metrics`` carries one label set per engine (``engine="0"`` …) — the
  whole server, engine by engine;
* the ``llamacpp`` flavor is N ``llama-server`` processes behind a load balancer (llama.cpp
  has no data-parallel mode): a ``GET`` carries no prompt to route by, so the balancer sends
  each one to the next replica in turn, and each read shows *that replica's* ``/metrics``
  (``llamacpp:`` names), ``/slots`` and ``/props`` — a part of the server, not the sum.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "SIGNAL_PATHS",
    "EngineLoad",
    "engines_metrics_text",
    "llamacpp_metrics_text",
    "metrics_text",
    "props_json",
    "slots_json",
]

SIGNAL_PATHS = frozenset({"/metrics", "/slots", "/props"})


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """One engine's (replica's) requests running and waiting, and its slots."""

    running: int
    waiting: int
    slots: int

    @property
    def kv_usage(self) -> float:
        """KV cache in use ≈ the share of its slots running (the simulator has no blocks
        per sequence in its report)."""
        return self.running / self.slots if self.slots else 0.0


def engines_metrics_text(model: str, engines: Sequence[EngineLoad]) -> str:
    """vLLM's ``/metrics`` (the gauges the gateway reads), one label set per engine."""
    lines = []
    for name, help_text, value in (
        ("vllm:num_requests_running", "Number of requests in model execution batches.",
         lambda e: float(e.running)),
        ("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
         lambda e: float(e.waiting)),
        ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
         lambda e: e.kv_usage),
        ("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage. "
         "DEPRECATED", lambda e: e.kv_usage),
    ):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        lines += [
            f'{name}{{engine="{i}",model_name="{model}"}} {value(e)}'
            for i, e in enumerate(engines)
        ]
    return "\n".join(lines) + "\n"


def metrics_text(model: str, running: int, waiting: int, slots: int) -> str:
    """vLLM's ``/metrics`` of one engine (KV use ≈ running / slots)."""
    return engines_metrics_text(model, [EngineLoad(running, waiting, slots)])


def llamacpp_metrics_text(engine: EngineLoad) -> str:
    """``llama-server --metrics``: requests processing and deferred, KV cache in use."""
    lines = []
    for name, help_text, value in (
        ("llamacpp:requests_processing", "Number of requests processing.", engine.running),
        ("llamacpp:requests_deferred", "Number of requests deferred.", engine.waiting),
        ("llamacpp:kv_cache_usage_ratio", "KV-cache usage. 1 means 100 percent usage.",
         engine.kv_usage),
    ):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {value}"]
    return "\n".join(lines) + "\n"


def slots_json(running: int, slots: int, n_ctx: int = 4096) -> str:
    """llama.cpp's ``/slots``: one object per slot, the first ``running`` processing."""
    return json.dumps(
        [{"id": i, "n_ctx": n_ctx, "is_processing": i < running} for i in range(slots)]
    )


def props_json(model: str, slots: int) -> str:
    """llama.cpp's ``/props`` (the part the gateway reads)."""
    return json.dumps({"total_slots": slots, "model_path": model})
