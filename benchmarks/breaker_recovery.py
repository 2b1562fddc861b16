"""What an SRE sees after an outage: seconds from the backend's return to the first call that
succeeds, and the probes the outage cost, by ``breaker_max_cooldown_s``.

One backend answering 500s from 0 to the outage's end, then answering; a call a second (steady
traffic, ``max_breaker_wait_s=0``: calls fail fast while the circuit is open). The circuit
opens after ``breaker_threshold`` failures, and each failed probe doubles the cool-down up
to the cap, so the wait after a long outage depends on where the outage ends in the last
cool-down: the outage's end is swept over ``--phases`` one-second steps. Virtual clock: the
whole table takes a few seconds.

    python benchmarks/breaker_recovery.py [--outages 60,300,600] [--caps 60,30,10]
"""

from __future__ import annotations

import argparse
import statistics

import httpx2

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual

USER = [{"role": "user", "content": "x"}]
ANSWER = {
    "id": "r", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


async def one_outage(outage_s: float, cap_s: float) -> tuple[float, int]:
    """(seconds from the return to the first success, requests the backend got while down)."""
    clock = LoopClock()
    during = 0

    def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal during
        if clock.now() < outage_s:
            during += 1
            return httpx2.Response(500, json={"error": {"message": "down"}})
        return httpx2.Response(200, json=ANSWER)

    b = gg.Backend(name="a", base_url="http://127.0.0.1:1/v1", model="m", api_key="EMPTY",
                   transport=httpx2.MockTransport(handler))
    async with gg.Gateway([b], clock=clock, seed=1, max_attempts=1, max_breaker_wait_s=0.0,
                          breaker_max_cooldown_s=cap_s) as gate:
        while True:
            try:
                await gate.chat(USER, max_tokens=5)
            except gg.GateError:
                await clock.sleep(1.0)
                continue
            return clock.now() - outage_s, during


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outages", default="60,300,600", help="outage lengths, seconds")
    parser.add_argument("--caps", default="60,30,10", help="breaker_max_cooldown_s values")
    parser.add_argument("--phases", type=int, default=60, help="outage ends swept, 1 s apart")
    args = parser.parse_args()
    print("| outage | breaker_max_cooldown_s | back → first success: mean | p50 | max "
          "| requests while down |")
    print("|---|---|---|---|---|---|")
    for outage in (float(x) for x in args.outages.split(",")):
        for cap in (float(x) for x in args.caps.split(",")):
            runs = [run_virtual(one_outage, outage + phase, cap) for phase in range(args.phases)]
            waits = [wait for wait, _ in runs]
            sent = [n for _, n in runs]
            print(f"| {outage:.0f} s | {cap:.0f} s | {statistics.mean(waits):.1f} s | "
                  f"{statistics.median(waits):.1f} s | {max(waits):.1f} s | "
                  f"{min(sent)}–{max(sent)} |")


if __name__ == "__main__":
    main()
