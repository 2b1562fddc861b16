"""The simulator's load reports, in the self-hosted servers' own formats.

``GET /metrics`` answers in vLLM's names, both generations (``vllm:kv_cache_usage_perc`` and
the deprecated ``vllm:gpu_cache_usage_perc``), and ``GET /slots`` / ``/props`` as llama.cpp's
server does, all from the scheduler's real state at that instant: what ``Backend(signals=
True)`` reads (gptgate/signals.py) is what the engine is doing, so tests and benchmarks of
signal-driven limits and routing run without a GPU.
"""

from __future__ import annotations

import json

__all__ = ["SIGNAL_PATHS", "metrics_text", "props_json", "slots_json"]

SIGNAL_PATHS = frozenset({"/metrics", "/slots", "/props"})


def metrics_text(model: str, running: int, waiting: int, slots: int) -> str:
    """vLLM's ``/metrics`` (the gauges the gateway reads; KV use ≈ running / slots)."""
    usage = running / slots if slots else 0.0
    labels = f'{{engine="0",model_name="{model}"}}'
    lines = []
    for name, kind, help_text, value in (
        ("vllm:num_requests_running", "gauge", "Number of requests in model execution "
         "batches.", float(running)),
        ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
         float(waiting)),
        ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
         usage),
        ("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent "
         "usage. DEPRECATED", usage),
    ):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name}{labels} {value}"]
    return "\n".join(lines) + "\n"


def slots_json(running: int, slots: int, n_ctx: int = 4096) -> str:
    """llama.cpp's ``/slots``: one object per slot, the first ``running`` processing."""
    return json.dumps(
        [{"id": i, "n_ctx": n_ctx, "is_processing": i < running} for i in range(slots)]
    )


def props_json(model: str, slots: int) -> str:
    """llama.cpp's ``/props`` (the part the gateway reads)."""
    return json.dumps({"total_slots": slots, "model_path": model})
