"""With ``shared=``, another process's successful probe closes only what the fleet opened
here — not a circuit this process's own refused key opened.

A pod on a revoked key opens its circuit itself (kept local: test_shared_refused_key.py).
When the backend then has an outage another process publishes, the fleet's open was applied
on top and marked the breaker as the fleet's, so the fleet's successful probe closed it: the
revoked pod went back to its dead key (``breaker_threshold`` more 401s, its cool-down of 600 s
cut to the outage's 1 s). Real redis-server.
"""

from __future__ import annotations

import anyio
import httpx2
import pytest

import gptgate as gg
from gptgate.shared.health import HEALTH_POLL_S
from tests.fleettools import namespace
from tests.test_shared_refused_key_run import ANSWER, NEW, OLD, URL, USER


async def test_the_fleets_probe_leaves_a_revoked_pods_circuit_open(redis_url: str) -> None:
    down = [True]
    hits = {"old": 0}

    def server(request: httpx2.Request) -> httpx2.Response:
        if request.headers["authorization"] != f"Bearer {NEW}":
            hits["old"] += 1
            return httpx2.Response(401, json={"error": {"message": "Incorrect API key",
                                                        "code": "invalid_api_key"}})
        return httpx2.Response(502, text="bad gateway") if down[0] else httpx2.Response(
            200, json=ANSWER)

    shared = gg.Shared(redis_url, namespace=namespace())

    def gate(key: str, cooldown_s: float) -> gg.Gateway:
        backend = gg.Backend(name="llm", base_url=URL, model="m", api_key=key,
                             transport=httpx2.MockTransport(server))
        return gg.Gateway([backend], shared=shared, breaker_threshold=3, max_attempts=1,
                          breaker_cooldown_s=cooldown_s, max_breaker_wait_s=0.0)

    old, new = gate(OLD, 600.0), gate(NEW, 1.0)
    async with old, new:
        for _ in range(3):
            with pytest.raises(gg.BadRequestError):
                await old.chat(USER)
        for _ in range(3):  # then an outage, which the other pod publishes
            with pytest.raises(gg.BackendError):
                await new.chat(USER)
        await anyio.sleep(4 * HEALTH_POLL_S)
        assert old.stats()["llm"].circuit == "open"
        down[0] = False
        await anyio.sleep(1.2)  # the outage's cool-down: the other pod's probe succeeds
        assert (await new.chat(USER)).text == "ok"
        assert new.stats()["llm"].circuit == "closed"
        await anyio.sleep(4 * HEALTH_POLL_S)  # its close reaches the other pod's poll
        assert old.stats()["llm"].circuit == "open"  # its key is still refused
        with pytest.raises(gg.BackendError):  # not sent to the dead key
            await old.chat(USER)
    assert hits["old"] == 3
