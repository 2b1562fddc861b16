"""An SDK call on ``gate.http_client`` refused before anything was sent is a failed call.

``calls_failed`` counted an SDK call by the requests it sent (gptgate/sdk_failed_calls.py): a
call whose request gptgate refused unsent — the backend's circuit open (a 503 the SDK does
not retry), the SDK addressing another server than the backend's (``MisaddressedRequestError``)
— failed without a trace in the ledger, while ``gate.chat``'s call refused the same way counts
one. During an outage, the very calls the circuit turned away were missing from the failure
count an SRE reads. Now each is one failed call at its backend, once however often the SDK
retries it; a refusal of the gateway's own dollar budget stays none (as ``gate.chat``'s).
Real ``openai`` package over loopback.
"""

from __future__ import annotations

import openai
import pytest

import gptgate as gg
from tests.test_sdk_failover import A_KEY, B_KEY, USER, dead_url, server


def _gate(a_url: str, **options: object) -> gg.Gateway:
    return gg.Gateway([gg.Backend(name="a", base_url=a_url, model="m", api_key=A_KEY)],
                      breaker_threshold=3, breaker_cooldown_s=600.0, max_breaker_wait_s=0.0,
                      deadline_s=30.0, **options)  # type: ignore[arg-type]


async def _open_a(gate: gg.Gateway) -> None:
    for _ in range(3):
        with pytest.raises(gg.GateError):
            await gate.chat(USER, max_attempts=1)
    assert gate.stats()["a"].circuit == "open"
    assert gate.ledger.entries["a"].calls_failed == 3


@pytest.mark.parametrize("retries", [0, 2])
async def test_an_sdk_call_refused_by_an_open_circuit_is_a_failed_call(retries: int) -> None:
    with dead_url() as a_url:
        async with _gate(a_url) as gate:
            await _open_a(gate)
            sdk = openai.AsyncOpenAI(api_key=A_KEY, base_url=a_url, max_retries=retries,
                                     http_client=gate.http_client("a"))
            for _ in range(2):
                with pytest.raises(openai.InternalServerError, match="circuit is open"):
                    await sdk.chat.completions.create(model="m", messages=USER)
            assert gate.ledger.entries["a"].calls_failed == 3 + 2  # before: 3
            with pytest.raises(gg.CircuitOpenError):
                await gate.chat(USER)
            assert gate.ledger.entries["a"].calls_failed == 3 + 2 + 1  # gate.chat's, the same


async def test_a_misaddressed_sdk_call_is_a_failed_call() -> None:
    with server(A_KEY) as a, server(B_KEY) as elsewhere:
        async with _gate(f"{a.url}/v1") as gate:
            sdk = openai.AsyncOpenAI(api_key=A_KEY, base_url=f"{elsewhere.url}/v1",
                                     max_retries=2, http_client=gate.http_client("a"))
            for _ in range(2):
                with pytest.raises(gg.MisaddressedRequestError):
                    await sdk.chat.completions.create(model="m", messages=USER)
            assert gate.ledger.entries["a"].calls_failed == 2  # before: 0
    assert a.seen == [] and elsewhere.seen == []


async def test_every_circuit_open_behind_a_fallback_client_is_one_failed_call() -> None:
    with dead_url() as a_url, dead_url() as b_url:
        backends = [gg.Backend(name="a", base_url=a_url, model="m", api_key=A_KEY),
                    gg.Backend(name="b", base_url=b_url, model="m", api_key=B_KEY)]
        async with gg.Gateway(backends, breaker_threshold=1, breaker_cooldown_s=600.0,
                              max_breaker_wait_s=0.0, deadline_s=30.0) as gate:
            for name in ("a", "b"):
                with pytest.raises(gg.GateError):
                    await gate.chat(USER, backend=name, max_attempts=1)
            sdk = openai.AsyncOpenAI(api_key=A_KEY, base_url=a_url, max_retries=2,
                                     http_client=gate.http_client("a", fallback=["b"]))
            with pytest.raises(openai.InternalServerError, match="circuit is open"):
                await sdk.chat.completions.create(model="m", messages=USER)
            entries = gate.ledger.entries
            assert (entries["a"].calls_failed, entries["b"].calls_failed) == (1 + 1, 1)


async def test_a_refusal_of_the_dollar_budget_is_no_failed_call() -> None:
    """The gateway's own budget turned the call away: none of the backend's failures, as a
    ``gate.chat`` refused by it is none."""
    with server(A_KEY) as a:
        gate = gg.Gateway(
            [gg.Backend(name="a", base_url=f"{a.url}/v1", model="m", api_key=A_KEY,
                        price=gg.Price(input_per_mtok=1e6, output_per_mtok=1e6))],
            budget=gg.Budget(usd_per_hour=0.001, on_exceed="raise"), deadline_s=30.0,
        )
        async with gate:
            sdk = openai.AsyncOpenAI(api_key=A_KEY, base_url=f"{a.url}/v1", max_retries=0,
                                     http_client=gate.http_client("a"))
            with pytest.raises(openai.RateLimitError):
                await sdk.chat.completions.create(model="m", messages=USER, max_tokens=500)
            entry = gate.ledger.entries["a"]
            assert (entry.calls_ok, entry.calls_failed) == (0, 0)
    assert a.seen == []


@pytest.mark.parametrize("retry", [True, False])
async def test_a_guarded_call_refused_by_an_open_circuit_is_a_failed_call(retry: bool) -> None:
    """The guard's own refusal before its body runs counts as ``gate.chat``'s does."""
    with dead_url() as a_url:
        async with _gate(a_url) as gate:
            await _open_a(gate)
            ran: list[int] = []

            @gate.guard(backend="a", retry=retry)
            async def ask() -> None:
                ran.append(1)

            with pytest.raises(gg.CircuitOpenError):
                await ask()
            assert ran == []
            assert gate.ledger.entries["a"].calls_failed == 3 + 1  # before: 3


def test_a_sync_sdk_call_refused_by_an_open_circuit_is_a_failed_call() -> None:
    with dead_url() as a_url:
        gate = gg.SyncGateway(
            backends=[gg.Backend(name="a", base_url=a_url, model="m", api_key=A_KEY)],
            breaker_threshold=3, breaker_cooldown_s=600.0, max_breaker_wait_s=0.0,
            deadline_s=30.0,
        )
        with gate:
            for _ in range(3):
                with pytest.raises(gg.GateError):
                    gate.chat(USER, max_attempts=1)
            sdk = openai.OpenAI(api_key=A_KEY, base_url=a_url, max_retries=2,
                                http_client=gate.http_client("a"))
            with pytest.raises(openai.InternalServerError, match="circuit is open"):
                sdk.chat.completions.create(model="m", messages=USER)
            assert gate.ledger.entries["a"].calls_failed == 3 + 1  # before: 3
