"""The cost of ``shared=`` on the hot path: at most two Redis round trips per call (one
acquire script, one pipelined release), counted at the socket against a real redis-server
(a new pooled connection's one-off handshake aside)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from redis.asyncio.connection import AbstractConnection

import gptgate as gg
from tests.mockbackend import USER, Script, backend, gateway, ok, wait_until


async def test_at_most_two_round_trips_per_call(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = 0
    send = AbstractConnection.send_packed_command

    async def counting(self: AbstractConnection, *args: Any, **kwargs: Any) -> None:
        nonlocal sent
        packed = b"".join(args[0]) if isinstance(args[0], list) else bytes(args[0])
        if b"HELLO" not in packed and b"CLIENT" not in packed:  # a new connection's setup
            sent += 1
        await send(self, *args, **kwargs)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counting)
    shared = gg.Shared(redis_url, namespace=f"t{uuid.uuid4().hex[:12]}", lease_s=60.0)
    gate = gateway(backend(Script(ok()), concurrency=4), shared=shared)
    async with gate:
        assert gate._fleet is not None
        fleet = gate._fleet
        await gate.chat(USER)  # warm: connection handshake, scripts loaded
        await wait_until(lambda: not fleet._pending)
        calls = 20
        before = sent
        for _ in range(calls):
            await gate.chat(USER)
            await wait_until(lambda: not fleet._pending)  # each release sent on its own
        per_call = (sent - before) / calls
        assert gate.stats()["mock"].fleet.state == "up"  # type: ignore[union-attr]
    assert per_call <= 2.0
