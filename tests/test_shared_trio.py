"""``shared=`` and a shared response cache talk to Redis through redis-py's asyncio client,
which cannot run under trio. A gateway opened under trio with either got redis-py's untyped
``RuntimeError: no running event loop`` from deep inside its connection pool; now a
``GateError`` at the start says what to do, nothing is left open, and the same gateway then
opens under asyncio."""

from __future__ import annotations

import uuid

import anyio
import pytest

import gptgate as gg

from .mockbackend import USER, Script, backend, gateway, ok


async def _use(gate: gg.Gateway) -> str:
    with anyio.fail_after(10.0):
        async with gate:
            return (await gate.chat(USER)).text


def _shared(redis_url: str) -> gg.Shared:
    return gg.Shared(redis_url, namespace=f"trio-{uuid.uuid4().hex[:8]}")


@pytest.mark.parametrize("where", ["shared", "response_cache"])
def test_redis_under_trio_is_a_typed_error_then_asyncio_opens_it(
    where: str, redis_url: str
) -> None:
    options: dict[str, object] = (
        {"shared": _shared(redis_url)} if where == "shared"
        else {"response_cache": gg.ResponseCache(shared=_shared(redis_url))}
    )
    gate = gateway(backend(Script(ok("served"))), **options)
    with pytest.raises(gg.GateError, match=r"needs asyncio.*trio"):
        anyio.run(_use, gate, backend="trio")
    assert anyio.run(_use, gate, backend="asyncio") == "served"
