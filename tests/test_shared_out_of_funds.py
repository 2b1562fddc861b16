"""With ``shared=``, an account out of funds opens the fleet's circuit, whatever status the
provider said it with; a refused key opens only its process's (test_shared_refused_key.py).

The account is the one every process with that backend (or ``fleet_key``) draws on: the
next process's requests meet the same empty balance, so one process's ``breaker_threshold``
refusals keep the fleet off it, and one probe per cool-down goes out for the fleet. A key may
be one pod's alone. Before, the split was by status (401/403 stayed local), so an empty
account said with a 403 (``billing_not_active``) stayed in its process — every other process
paid its own ``breaker_threshold`` refusals — while the same account's 402 was the fleet's.
Real redis-server, real loopback server.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import gptgate as gg
from benchmarks._errorserver import error_server
from gptgate.circuit_cause import FailureCause
from gptgate.shared.health import HEALTH_POLL_S
from tests.fleettools import namespace

USER = [{"role": "user", "content": "hi"}]
DEEPSEEK_402 = (402, {"error": {"message": "Insufficient Balance", "type": "unknown_error",
                                "code": "invalid_request_error"}})
BILLING_403 = (403, {"error": {"message": "Billing is not active for this account.",
                               "type": "invalid_request_error", "code": "billing_not_active"}})


@pytest.mark.parametrize("refusal", [DEEPSEEK_402, BILLING_403], ids=["402", "403"])
async def test_one_processs_empty_account_opens_the_fleets_circuit(
    redis_url: str, refusal: tuple[int, Any]
) -> None:
    with error_server(*refusal) as server:
        url = f"{server.url}/v1"
        shared = gg.Shared(redis_url, namespace=namespace())

        def gate() -> gg.Gateway:
            backend = gg.Backend(name="llm", base_url=url, model="m", api_key="sk-fleet-0")
            return gg.Gateway([backend], shared=shared, breaker_threshold=3,
                              breaker_cooldown_s=600.0, max_breaker_wait_s=0.0)

        first, second = gate(), gate()
        async with first, second:
            for _ in range(3):
                with pytest.raises(gg.OutOfFundsError):
                    await first.chat(USER)
            with anyio.fail_after(20 * HEALTH_POLL_S):  # the fleet's open, at a next poll
                while second.stats()["llm"].circuit != "open":
                    await anyio.sleep(HEALTH_POLL_S / 5)
            with pytest.raises(gg.BackendError):  # not sent: the fleet's account is empty
                await second.chat(USER)
    assert server.requests == 3


def test_a_refused_key_and_an_empty_account_are_told_apart() -> None:
    assert FailureCause("authentication failed", 401).refused_key
    assert not FailureCause("out of funds", 403, funds=True).refused_key
