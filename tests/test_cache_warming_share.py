"""A late warm-up holds one place, not its group's share of the backend (issue 31, round 12;
gptgate/cache_warming.py).

The shares split a backend's limit among its running groups so that the ramp never leaves
it idle while calls wait. A group whose warm-up is still in flight — a straggler, or a
warm-up behind a server queue — can use one place; its share's other places stayed empty for
the whole wait while the warm groups' calls waited at their shares (family draw 23, 13 × 10
slots, 4.8% stragglers of 4.5 s: group 3's warm-up started at 4.5 s, the gate ran 47 of its
64 places until then)."""

from __future__ import annotations

import anyio

from gptgate.cache import CacheGate, CacheTicket
from gptgate.scenarios import RampPolicy
from gptgate.sim import LoopClock, run_virtual
from tests.cache_order_check import CACHEABLE, assert_gate_against_plain, group

JOB = RampPolicy(start=2, window=2, turn_wait_s=600.0)


def test_a_late_warm_up_s_share_goes_to_the_warm_groups() -> None:
    """Four groups at limit 16: three warm-ups prefill in 0.1 s, the fourth's hangs. Until it
    is late (3 × the backend's prefill) the shares stay even: a warm-up on its way is not
    a straggler, and the first groups warm do not burst past their shares (13 of 16 in
    flight). Once it is late, the next call to end gives the warm groups the places it does
    not use (16 of 16; before, 13 to the end of its wait); once it is warm, its calls take
    their share (4) as before."""

    async def main() -> None:
        clock = LoopClock()
        gate = CacheGate(clock=clock)
        limit = 16
        warmups = [await gate.enter("b", group(k), JOB, limit=limit) for k in "abcd"]
        await clock.sleep(0.1)
        for t in warmups[:3]:
            t.prefilled()
            t.observe(cached_tokens=0, input_tokens=CACHEABLE + 100)
            t.release()
        admitted: dict[str, list[CacheTicket]] = {k: [] for k in "abcd"}

        async def call(key: str) -> None:
            admitted[key].append(await gate.enter("b", group(key), JOB, limit=limit))
            await clock.sleep(1e6)

        async with anyio.create_task_group() as tg:
            for key in "abc" * 10:
                tg.start_soon(call, key)
            await clock.sleep(0.1)
            assert gate.in_flight("b") == 13  # even shares while the warm-up is on time
            await clock.sleep(1.0)  # late now; a call ends
            admitted["a"][0].release()
            await clock.sleep(0.01)
            assert gate.in_flight("b") == limit  # 15 warm calls and the hanging warm-up
            assert [len(admitted[k]) for k in "abcd"] == [6, 5, 5, 0]
            warmups[3].prefilled()  # the fourth is warm: the shares are even again
            warmups[3].observe(cached_tokens=0, input_tokens=CACHEABLE + 100)
            warmups[3].release()
            for _ in range(6):
                tg.start_soon(call, "d")
            await clock.sleep(0.1)
            assert len(admitted["d"]) == 4  # its share at once, as before
            tg.cancel_scope.cancel()

    run_virtual(main)


def test_a_straggling_warm_up_does_not_hold_the_job_back() -> None:
    """The server family's draw 23 (13 replicas × 10 slots, spreading a prefix at 3 in
    flight, 4.8% stragglers of 4.5 s), the judge's three engine seeds pooled: before, 56.4 s
    against the plain client's 51.1 s (1.104×; the floor: 1.10×); now 55.8 s (1.09×)."""
    assert_gate_against_plain(23, 64, hits=0.05, time=1.10, repeats=3)
