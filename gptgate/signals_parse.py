"""Self-hosted servers' own load reports, read into one :class:`ServerLoad`.

vLLM, SGLang and llama.cpp publish what ``concurrency="auto"`` otherwise infers from
latency: requests running, requests waiting, KV-cache use, slots. The Prometheus text is
parsed by ``prometheus-client``'s parser (the ``signals`` extra), not by hand; llama.cpp's
``/slots`` and ``/props`` are JSON. Names of both vLLM generations are accepted
(``kv_cache_usage_perc`` and the deprecated ``gpu_cache_usage_perc``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["ServerLoad", "merge_props", "parse_metrics", "parse_slots"]


@dataclass(frozen=True, slots=True)
class ServerLoad:
    """What one read of the server said; ``None`` where the server does not say it."""

    running: int | None = None
    waiting: int | None = None
    #: KV cache in use, 0..1
    kv_usage: float | None = None
    slots_total: int | None = None
    slots_busy: int | None = None
    #: SGLang's prefix-cache hit rate, 0..1
    cache_hit_rate: float | None = None

    @property
    def empty(self) -> bool:
        return self.running is None and self.waiting is None and self.slots_total is None


# metric family name (without the _total suffix the parser strips) → field; first found wins
_GAUGES: Mapping[str, tuple[str, ...]] = {
    "running": (
        "vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing",
    ),
    "waiting": (
        "vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred",
    ),
    "kv_usage": (
        "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
        "llamacpp:kv_cache_usage_ratio",
    ),
    "cache_hit_rate": ("sglang:cache_hit_rate",),
}


#: fields that are shares (0..1) of each engine's own capacity: averaged over engines
_SHARES = frozenset({"kv_usage", "cache_hit_rate"})


def parse_metrics(text: str) -> ServerLoad:
    """A ``/metrics`` page (Prometheus text) → the load it reports over the label sets of
    a family (one per model / engine / data-parallel rank): requests summed, shares (KV
    cache in use, hit rate) averaged — two engines 60% full are not one full one.

    Raises ``ValueError`` on text the parser cannot read (the reader logs it once)."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == family.name or sample.name == family.name + "_total":
                sums[family.name] = sums.get(family.name, 0.0) + float(sample.value)
                counts[family.name] = counts.get(family.name, 0) + 1
    found: dict[str, Any] = {}
    for field_name, names in _GAUGES.items():
        name = next((n for n in names if n in sums), None)
        value = None if name is None else (
            sums[name] / counts[name] if field_name in _SHARES else sums[name]
        )
        if value is None or value != value:  # NaN: the server has nothing to say yet
            continue
        if field_name in ("running", "waiting"):
            found[field_name] = max(0, round(value))
        else:
            found[field_name] = min(1.0, max(0.0, value))
    return ServerLoad(**found)


def parse_slots(body: str | bytes) -> ServerLoad:
    """llama.cpp's ``/slots`` JSON (a list, one object per slot with ``is_processing``;
    older builds said ``state`` 0 idle / 1 processing) → slots total and busy."""
    slots = json.loads(body)
    if not isinstance(slots, list):
        raise ValueError("/slots: expected a JSON list")
    busy = 0
    for slot in slots:
        if not isinstance(slot, dict):
            raise ValueError("/slots: expected a list of objects")
        if slot.get("is_processing", slot.get("state", 0)):
            busy += 1
    return ServerLoad(slots_total=len(slots), slots_busy=busy, running=busy)


def merge_props(load: ServerLoad, body: str | bytes) -> ServerLoad:
    """llama.cpp's ``/props``: ``total_slots`` where ``/slots`` was not readable."""
    props = json.loads(body)
    total = props.get("total_slots") if isinstance(props, dict) else None
    if isinstance(total, int) and total > 0 and load.slots_total is None:
        return replace(load, slots_total=total)
    return load


def combine(first: ServerLoad, second: ServerLoad) -> ServerLoad:
    """Fields of ``first``, filled in from ``second`` where ``first`` has none."""
    return ServerLoad(
        **{
            name: getattr(first, name) if getattr(first, name) is not None
            else getattr(second, name)
            for name in ServerLoad.__dataclass_fields__
        }
    )
