"""A hedge's duplicate may borrow one permit past ``concurrency=`` once its call's request is
lost (gptgate/hedge_permit.py): on a backend one slot wide a stalled request holds the only
permit, and its duplicate used to wait for the stall itself to end (family draw 93: p99
1.00× unhedged, the oracle hedger 0.33×). At most one is lent per backend, within the pool,
never past a fleet's shared cap, and not before the request is lost and the duplicate has
waited one normal wait in turn."""

from __future__ import annotations

import anyio

import gptgate as gg
from gptgate.clock import SystemClock
from gptgate.hedge_timing import Progress
from gptgate.limits import FixedLimit, Limiter
from gptgate.sim import family
from gptgate.testing import LoopClock, run_virtual, sim_backend

CALLS = 200


async def _one_slot_job(hedge: bool) -> tuple[float, int, int]:
    """Family draw 93 (one slot, 2.4% of the requests stalled 1.7–3.3 s), paired draws, at
    concurrency 1: the p99 from each call's send, billed tokens, and the most in flight."""
    server = family(93).model_copy(update={"paired_draws": True})
    clock = LoopClock()
    backend, engine = sim_backend(
        server, name="sim", clock=clock, seed=93, concurrency=1, timeout=3600.0
    )
    items = [
        {"messages": [{"role": "user", "content": f"summarise document {i}"}],
         "max_tokens": 150, "stream": True}
        for i in range(CALLS)
    ]
    most = 0
    async with gg.Gateway([backend], clock=clock, seed=93) as gate:
        limiter = gate.runner.router.by_name["sim"].limiter

        async def watch() -> None:
            nonlocal most
            while True:
                most = max(most, limiter.in_flight)
                await clock.sleep(0.01)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            results = await gate.map(items, hedge=hedge, max_pending=CALLS)
            tg.cancel_scope.cancel()
    latencies = sorted(r.latency_s - r.queue_s for r in results if isinstance(r, gg.ChatResult))
    assert len(latencies) == CALLS
    snap = engine.ledger.snapshot()
    return latencies[int(0.99 * CALLS)], snap.input_tokens + snap.output_tokens, most


def test_on_a_one_slot_backend_a_stalled_calls_duplicate_borrows_a_permit() -> None:
    plain_p99, plain_billed, plain_most = run_virtual(_one_slot_job, False)
    hedged_p99, hedged_billed, hedged_most = run_virtual(_one_slot_job, True)
    assert plain_most == 1
    assert hedged_most == 2  # one lent past concurrency=1, never more
    assert hedged_p99 <= 0.7 * plain_p99, (hedged_p99, plain_p99)
    assert hedged_billed <= 1.05 * plain_billed


def _limiter(n: int, max_inflight: int | None = None) -> Limiter:
    return Limiter(FixedLimit(n), clock=SystemClock(), max_inflight=max_inflight)


def test_borrow_lends_one_permit_past_a_full_limit_and_no_second() -> None:
    limiter = _limiter(2)
    held = [limiter._admit(), limiter._admit()]
    lent = limiter.borrow()
    assert lent is not None and limiter.in_flight == 3
    assert limiter.borrow() is None  # one out already
    lent.ignore()
    assert limiter.borrow() is not None  # given back: lendable again
    for permit in held:
        permit.ignore()


def test_borrow_lends_nothing_while_the_limit_has_room_or_the_pool_is_full() -> None:
    limiter = _limiter(2)
    first = limiter._admit()
    assert limiter.borrow() is None  # acquire admits at once
    first.ignore()
    full_pool = _limiter(2, max_inflight=2)
    held = [full_pool._admit(), full_pool._admit()]
    assert full_pool.borrow() is None  # no connection for it
    for permit in held:
        permit.ignore()


def test_a_duplicate_is_lent_a_permit_only_once_its_request_is_lost_and_it_waited_in_turn(
) -> None:
    progress = Progress()
    assert progress.lend_at(0.0, 0.5, 0.95, 20, True) is None  # no samples: never
    for i in range(40):
        progress.shown(0.0, 0.5 + 0.01 * (i % 5), first_token=True)
    normal = progress.first_tokens.normal(0.95)[0]
    fence = progress.first_tokens.fence
    # asked early: at the far fence of the request's send
    assert progress.lend_at(0.0, 0.0, 0.95, 20, True) == fence
    # asked late: after one normal wait in turn
    assert progress.lend_at(0.0, 2.0, 0.95, 20, True) == 2.0 + normal
