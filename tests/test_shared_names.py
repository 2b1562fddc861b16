"""One backend name pointing at another URL in another process of the fleet (config drift in a
rolling deploy): a backend is keyed by name + base_url + model, so the two are separate fleets
with a limit each on what may be one server. That was silent; each process now warns once,
naming both (gptgate/shared/names.py)."""

from __future__ import annotations

import logging

import pytest

from tests.fleettools import fleet_client, namespace


def drift_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "in another process" in r.getMessage()]


async def test_one_name_two_urls_warns_once_naming_both(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gptgate")
    ns = namespace()
    async with fleet_client(redis_url, ns) as old, fleet_client(redis_url, ns) as new:
        old.admission(name="llm", base_url="http://10.0.0.5:8000/v1", model="m", limit=4)
        new.admission(name="llm", base_url="http://llm.svc:8000/v1", model="m", limit=4)
        for _ in range(2):
            await old._renew()
            await new._renew()
            await old._renew()
    warnings = drift_warnings(caplog)
    assert len(warnings) == 2  # once in each process
    assert all("http://10.0.0.5:8000/v1" in w and "http://llm.svc:8000/v1" in w for w in warnings)
    assert all("'llm'" in w for w in warnings)


async def test_the_same_backend_in_every_process_says_nothing(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gptgate")
    ns = namespace()
    async with fleet_client(redis_url, ns) as a, fleet_client(redis_url, ns) as b:
        for client in (a, b):
            client.admission(name="llm", base_url="http://127.0.0.1:9/v1", model="m", limit=4)
            client.admission(name="other", base_url="http://127.0.0.1:8/v1", model="m", limit=2)
        b.admission(name="only-b", base_url="http://127.0.0.1:7/v1", model="x", limit=1)
        for client in (a, b, a):
            await client._renew()
    assert drift_warnings(caplog) == []
