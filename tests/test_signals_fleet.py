"""``shared=`` with ``signals=True``: one process of the fleet reads a server's signals and
the others take its read (gptgate/signals_fleet.py), against a real redis-server."""

from __future__ import annotations

import anyio
import httpx2

import gptgate as gg
from gptgate.sim import LoopClock, SimEngine, SimTransport
from tests.fleettools import namespace


class _Counting(httpx2.AsyncBaseTransport):
    """The simulator, counting the ``/metrics`` reads it answers."""

    def __init__(self, engine: SimEngine) -> None:
        self.inner = SimTransport(engine)
        self.reads = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path == "/metrics":
            self.reads += 1
        return await self.inner.handle_async_request(request)


async def _two_processes(url: str, *, shared: bool) -> tuple[int, list[gg.ServerSignals]]:
    engine = SimEngine("gpu", clock=LoopClock(), seed=1)
    transport = _Counting(engine)
    ns = namespace()

    def gateway() -> gg.Gateway:
        backend = gg.Backend(
            name="v", provider="vllm", base_url="http://127.0.0.1:8000/v1", model="m",
            transport=transport, signals=True, signals_interval_s=0.1,
        )
        options = {"shared": gg.Shared(url, namespace=ns, lease_s=5.0)} if shared else {}
        return gg.Gateway([backend], **options)  # type: ignore[arg-type]

    a, b = gateway(), gateway()
    async with a, b:
        await anyio.sleep(1.0)
        seen = [a.stats()["v"].server, b.stats()["v"].server]
    return transport.reads, seen


async def test_the_fleet_reads_a_server_once_an_interval(redis_url: str) -> None:
    alone, _ = await _two_processes(redis_url, shared=False)
    together, seen = await _two_processes(redis_url, shared=True)
    assert alone >= 16  # two processes, ten intervals each
    assert together <= 0.7 * alone
    # both processes know the server's load, the follower from the reader's publication
    assert all(s.running is not None and s.age_s is not None and s.age_s < 0.3 for s in seen)
