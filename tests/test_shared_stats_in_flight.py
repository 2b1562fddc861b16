"""``stats()``'s ``in_flight`` and ``queued`` with ``shared=``: a call waiting for the fleet's
permit is queued, not in flight.

Found by sampling ``stats()`` of two ``SyncGateway`` processes on one fleet limit of 2 under 8
threads of calls: each showed ``in_flight`` 2 in every sample — 4 on a backend the fleet held
at 2 (the simulator's peak: 2) — because a call counted as in flight once it held this
process's own permit, while it still waited for the fleet's. A dashboard summing the pods, or
an SRE reading "in flight = limit" in each, saw twice the load there was.
"""

from __future__ import annotations

import anyio
import httpx2

import gptgate as gg
from tests.fleettools import namespace
from tests.mockbackend import Script, backend, gateway, ok

USER = [{"role": "user", "content": "hi"}]


async def test_a_call_waiting_for_the_fleets_permit_is_queued(redis_url: str) -> None:
    release, sent = anyio.Event(), anyio.Event()

    async def held(request: httpx2.Request) -> httpx2.Response:
        sent.set()
        await release.wait()
        return ok()

    script = Script(held)
    ns = namespace()
    gates = [gateway(backend(script, concurrency=1), shared=gg.Shared(redis_url, namespace=ns))
             for _ in range(2)]
    async with gates[0], gates[1], anyio.create_task_group() as tg:
        tg.start_soon(gates[0].chat, USER)
        await sent.wait()  # the first process holds the fleet's only permit
        tg.start_soon(gates[1].chat, USER)
        with anyio.fail_after(5):
            while (fleet := gates[1].stats()["mock"].fleet) is None or fleet.waiting < 1:
                await anyio.sleep(0.005)
        first, second = (g.stats()["mock"] for g in gates)
        release.set()
    assert (first.in_flight, first.queued) == (1, 0)
    assert (second.in_flight, second.queued) == (0, 1)
    assert len(script.requests) == 2 and script.max_in_flight == 1
