"""What a ``gate.embed`` caller passes beside its texts reaches the provider as the OpenAI
SDK would send it: ``extra_headers`` as HTTP headers (before, it went into the JSON body —
a 400 "Unrecognized request argument" failing every caller merged with it, and a tenant's
own ``Authorization`` sent as a body field), callers with other headers are never merged
into one request; ``dimensions=`` shortens the simulator's vectors as OpenAI's
text-embedding-3 models do (before, the simulator ignored it: 8 floats for
``dimensions=16``)."""

from __future__ import annotations

import json

import anyio
import httpx2

import gptgate as gg
from gptgate.sim import LoopClock, SimEngine, SimTransport, run_virtual
from gptgate.sim.embeddings import vector_for


class Seen(httpx2.AsyncBaseTransport):
    """The simulator, with each embeddings request's headers and body kept."""

    def __init__(self, engine: SimEngine) -> None:
        self.inner = SimTransport(engine)
        self.requests: list[tuple[httpx2.Headers, dict[str, object]]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path.endswith("/embeddings"):
            self.requests.append((request.headers, json.loads(request.content)))
        return await self.inner.handle_async_request(request)


def _gate(clock: LoopClock) -> tuple[gg.Gateway, Seen]:
    seen = Seen(SimEngine("gpu", clock=clock, seed=1))
    backend = gg.Backend(name="emb", base_url="http://127.0.0.1:8000/v1", model="m",
                         embedding_model="text-embedding-3-small", transport=seen)
    return gg.Gateway([backend], clock=clock, max_attempts=1), seen


def test_extra_headers_go_as_headers_and_callers_with_other_headers_are_not_merged() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, seen = _gate(clock)
        got: dict[str, object] = {}

        async def one(text: str, tenant: str | None) -> None:
            headers = {"X-Tenant": tenant} if tenant else None
            extra = {"extra_headers": headers} if headers else {}
            got[text] = await gate.embed(text, **extra)

        async with gate, anyio.create_task_group() as tg:
            tg.start_soon(one, "a", "t1")
            tg.start_soon(one, "b", "t1")
            tg.start_soon(one, "c", "t2")
            tg.start_soon(one, "d", None)
        assert got == {t: vector_for(t, 8) for t in "abcd"}
        by_tenant = sorted(
            (headers.get("x-tenant") or "", sorted(body["input"]))  # type: ignore[arg-type]
            for headers, body in seen.requests
        )
        assert by_tenant == [("", ["d"]), ("t1", ["a", "b"]), ("t2", ["c"])]
        assert all("extra_headers" not in body for _, body in seen.requests)

    run_virtual(main)


def test_bad_extra_headers_are_a_typed_error_and_send_nothing() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, seen = _gate(clock)
        async with gate:
            for bad in ("X-Tenant: t1", {"X-Tenant": 1}):
                try:
                    await gate.embed("x", extra_headers=bad)
                except gg.BadRequestError as error:
                    assert "extra_headers" in str(error)
                else:
                    raise AssertionError(f"extra_headers={bad!r} was taken")
        assert seen.requests == []

    run_virtual(main)


def test_dimensions_shortens_the_simulators_vectors() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, seen = _gate(clock)
        async with gate:
            short = await gate.embed(["a", "b"], dimensions=16)
            plain = await gate.embed(["a", "b"])
        assert short == [vector_for("a", 16), vector_for("b", 16)]
        assert [len(v) for v in plain] == [8, 8]
        assert [body.get("dimensions") for _, body in seen.requests] == [16, None]

    run_virtual(main)
