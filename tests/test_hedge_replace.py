"""A duplicate that stalls as its call's request did is replaced by a fresh one (both past
the far fence of the backend's normal waits, nothing shown): a stall is a request's luck,
not the call's (family draw 1035: three of the job's four slowest calls were those whose
duplicate stalled too, p99 0.94× unhedged against the oracle hedger's 0.51×). At most
``REPLACEMENTS`` times, within the call's one room in the hedge budget."""

from __future__ import annotations

import json

import httpx2

from gptgate.hedge_timing import REPLACEMENTS
from gptgate.testing import LoopClock, run_virtual
from tests.mockbackend import completion, sse
from tests.test_hedge import EAGER, FAST, STALL, _gate, _hedges, _msg, _warm


class Stalls:
    """Serves each request in FAST s, except the first ``stalls`` requests of the prompt
    ``slow`` (STALL s each): requests lost before their first token."""

    def __init__(self, clock: LoopClock, stalls: int) -> None:
        self.clock = clock
        self.stalls = stalls
        self.sent = 0

    def transport(self, name: str) -> httpx2.MockTransport:
        async def handler(request: httpx2.Request) -> httpx2.Response:
            body = json.loads(request.content)
            slow = body["messages"][-1]["content"] == "slow"
            if slow:
                self.sent += 1
            await self.clock.sleep(STALL if slow and self.sent <= self.stalls else FAST)
            if not body.get("stream"):
                return httpx2.Response(200, json=completion("answer " * 10))
            return httpx2.Response(
                200, content=sse(["a", "b"]), headers={"content-type": "text/event-stream"}
            )

        return httpx2.MockTransport(handler)


def _slow_call(stalls: int) -> tuple[float, int, int]:
    """One call of prompt ``slow`` after a warm-up: its latency, the requests it sent, and
    the duplicates counted."""

    async def main() -> tuple[float, int, int]:
        clock = LoopClock()
        server = Stalls(clock, stalls)
        gate = _gate(clock, server, "a")  # type: ignore[arg-type]
        async with gate:
            await _warm(gate)
            result = await gate.chat(_msg("slow"), hedge=EAGER)
            return result.latency_s, server.sent, _hedges(gate)["a"]

    return run_virtual(main)


def test_a_duplicate_that_stalls_too_is_replaced_by_a_fresh_one() -> None:
    latency, sent, hedges = _slow_call(stalls=2)
    # sent at 0, duplicated past the normal wait (1 s), replaced once both are past the far
    # fence (the duplicate's send + 1 s), answered a normal wait later
    assert sent == 3 and hedges == 2
    assert latency <= 3 * FAST + 0.1, latency  # was STALL: the duplicate's stall


def test_a_lost_duplicate_is_replaced_at_most_replacements_times() -> None:
    latency, sent, hedges = _slow_call(stalls=100)
    assert sent == 2 + REPLACEMENTS and hedges == 1 + REPLACEMENTS
    # the stalls end: the first to answer after as long from its own send wins
    assert latency <= STALL + (1 + REPLACEMENTS) * FAST + 0.1


def test_a_duplicate_that_answers_is_not_replaced() -> None:
    latency, sent, hedges = _slow_call(stalls=1)
    assert sent == 2 and hedges == 1
    assert latency <= 2 * FAST + 0.1
