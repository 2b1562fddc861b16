"""Where a chaos ``map`` call's time past its deadline goes: the chaos suite run with each
``gate.map`` call timed from its start to its return, and each of its batched items from the
start of its deadline to its end, beside the event loop's lateness (a 10 ms timer).

A diagnostic, not a benchmark. For each map that ended over its deadline + 1 s after it began
it prints how long after the map began its items' deadlines started, how far past their own
deadlines they ended, how long the map took to return after its last item ended, and the
loop's worst lateness while its items were pulled, near its end and over its whole run; then
the distributions over all maps. It found that an item's deadline started when the event
loop first ran its task — up to 9 s (simulated) after the map began on a busy loop — so a map
whose items were shed on time could still end 4.4 s past its caller's deadline with the loop
on time at its end (docs/guide/deadlines.md, "When the event loop is late").

    python benchmarks/chaos_maps.py [chaos.py options, e.g. --seeds 2 --calls 3000 --duration 120]
"""

from __future__ import annotations

import asyncio
import contextvars
import runpy
import sys
import time
from pathlib import Path
from typing import Any

from _loop_lag import watch_lateness

import gptgate.batching as batching
import gptgate.gateway as gateway
from gptgate.clock import Clock
from gptgate.sim.chaos import ChaosConfig

_DEADLINE_S = ChaosConfig().deadline_s
_MAP: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("map", default=None)
_items: dict[int, dict[str, Any]] = {}
_lags: list[tuple[float, float]] = []
_clock: list[Clock] = []
_maps: list[dict[str, Any]] = []


def _lag(since: float, until: float) -> float:
    return max((late for woke, late in _lags if since <= woke <= until + 0.02), default=0.0)


_original_map = gateway.Gateway.map


async def _map(self: gateway.Gateway, items: Any, **kwargs: Any) -> Any:
    if not _clock:
        _clock.append(self.clock)
        asyncio.get_running_loop().create_task(watch_lateness(_lags))  # runs to the end
    record: dict[str, Any] = {"begun": self.clock.now(), "real": time.monotonic(), "items": []}
    _MAP.set(record)
    try:
        results = await _original_map(self, items, **kwargs)
        record["outcome"] = sorted({type(r).__name__ for r in results})
        return results
    except BaseException as error:
        record["outcome"] = repr(error)[:60]
        raise
    finally:
        record["end"], record["real_end"] = self.clock.now(), time.monotonic()
        _maps.append(record)


_original_submit = batching.MicroBatcher.submit


async def _submit(self: Any, item: Any) -> Any:
    record = _MAP.get()
    if record is not None and isinstance(item, dict) and gateway._DEADLINE_KEY in item:
        entry = {"deadline": item[gateway._DEADLINE_KEY]}
        record["items"].append(entry)
        _items[id(item)] = entry
    return await _original_submit(self, item)


_original_item = gateway.Gateway._chat_kwargs


async def _item(self: gateway.Gateway, kwargs: dict[str, Any]) -> Any:
    entry = _items.pop(id(kwargs), None)
    try:
        return await _original_item(self, kwargs)
    except BaseException as error:
        if entry is not None:
            entry["outcome"] = repr(error)[:90]
        raise
    finally:
        if entry is not None:
            entry["end"] = self.clock.now()


def _quantiles(values: list[float]) -> str:
    values = sorted(values)
    if not values:
        return "none"
    at = [values[min(len(values) - 1, int(q * len(values)))] for q in (0.5, 0.9, 0.99)]
    return (f"n {len(values)}, p50 {at[0]:.3f}, p90 {at[1]:.3f}, p99 {at[2]:.3f}, "
            f"max {values[-1]:.3f}")


def _show(scale: float) -> None:
    out = sys.stderr
    late = [m for m in _maps if m["end"] - m["begun"] > _DEADLINE_S + 1.0]
    print(f"\n{len(_maps)} maps, {len(late)} ended over their deadline + 1 s", file=out)
    print("past s | items' deadlines began (s after the map) | items past their own (max) | "
          "last item's end to the map's return | loop late (real s): pulling, at the end, "
          "whole run | outcome", file=out)
    for m in sorted(late, key=lambda m: m["begun"]):
        items = [i for i in m["items"] if "end" in i]
        past = m["end"] - m["begun"] - _DEADLINE_S
        if not items:
            print(f"{past:6.2f} | no batched items", file=out)
            continue
        began = [i["deadline"] - _DEADLINE_S - m["begun"] for i in items]
        own = max(i["end"] - i["deadline"] for i in items)
        handed = m["end"] - max(i["end"] for i in items)
        pulled = m["real"] + max(began) / scale
        print(f"{past:6.2f} | {min(began):5.2f}..{max(began):5.2f} | {own:6.2f} | "
              f"{handed:5.2f} | {_lag(m['real'], pulled):.2f}, "
              f"{_lag(m['real_end'] - 0.5, m['real_end']):.2f}, "
              f"{_lag(m['real'], m['real_end']):.2f} | {m['outcome']}", file=out)
    began_all = [i["deadline"] - _DEADLINE_S - m["begun"] for m in _maps for i in m["items"]]
    handed_all = [
        m["end"] - max(i["end"] for i in m["items"]) for m in _maps
        if m["items"] and all("end" in i for i in m["items"])
    ]
    print(f"\nitems' deadlines began after their map (simulated s): {_quantiles(began_all)}",
          file=out)
    print(f"last item's end to the map's return (simulated s): {_quantiles(handed_all)}",
          file=out)


def main() -> None:
    gateway.Gateway.map = _map  # type: ignore[method-assign]
    batching.MicroBatcher.submit = _submit  # type: ignore[method-assign]
    gateway.Gateway._chat_kwargs = _item  # type: ignore[method-assign]
    sys.argv = ["chaos.py", *sys.argv[1:]]
    try:
        runpy.run_path(str(Path(__file__).with_name("chaos.py")), run_name="__main__")
    finally:
        _show(_clock[0].scale if _clock else 1.0)


if __name__ == "__main__":
    main()
