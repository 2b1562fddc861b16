"""With ``shared=``, a refused key opens only the circuit of the process that holds it.

A refused key (401/403) is the failure of the key, and processes of one fleet may hold
different keys for one backend: a rolling key rotation (old pods still on the revoked key,
new ones on its successor), or one label's processes with a key each
(``Backend(fleet_key=...)``). Published like a server's failure, the old pods' 401s opened the
circuit in every process: the new pods, whose key works, stopped sending there for the whole
cool-down, and a probe by an old pod doubled it. Each process that holds a refused key finds
it out itself, in ``breaker_threshold`` requests. Real redis-server, real loopback server
checking the key.
"""

from __future__ import annotations

import anyio
import pytest

import gptgate as gg
from benchmarks._keyserver import key_server
from gptgate.shared.health import HEALTH_POLL_S
from tests.fleettools import namespace

OLD = "sk-proj-old-0123456789abcdef0123"
NEW = "sk-proj-new-fedcba9876543210fedc"
USER = [{"role": "user", "content": "hi"}]


async def test_an_old_pods_revoked_key_leaves_the_new_pods_circuit_closed(
    redis_url: str,
) -> None:
    with key_server(NEW) as server:
        shared = gg.Shared(redis_url, namespace=namespace())

        def gate(key: str) -> gg.Gateway:
            backend = gg.Backend(name="llm", base_url=server.url, model="m", api_key=key,
                                 concurrency=4)
            return gg.Gateway([backend], shared=shared, breaker_threshold=3,
                              breaker_cooldown_s=600.0, max_breaker_wait_s=0.0)

        old, new = gate(OLD), gate(NEW)
        async with old, new:
            for _ in range(3):
                with pytest.raises(gg.BadRequestError):
                    await old.chat(USER)
            assert old.stats()["llm"].circuit == "open"
            # a published open reaches the other process at its next poll of the fleet
            await anyio.sleep(4 * HEALTH_POLL_S)
            assert new.stats()["llm"].circuit == "closed"  # open before, for 600 s
            answers = [await new.chat(USER) for _ in range(3)]
    assert [a.text for a in answers] == ["ok"] * 3
    assert server.answered == 3 and server.refused == 3
