"""An account out of funds met by an SDK on ``gate.http_client`` (or a guard around one) is
what it is on ``gate.chat``: an ``OutOfFundsError`` that counts against the backend's circuit
(tests/test_out_of_funds.py). Two of the three providers say it only in the body — OpenAI's
429 ``insufficient_quota``, Anthropic's 400 "credit balance is too low" — and the transport
classified an error response by its status alone, the body unread.

Before: through the SDK, OpenAI's empty account was a rate limit (never counted: 20 of 20
requests sent to the dead account, the circuit closed; with a ``retry-after`` the transport
requeued each refusal on it) and Anthropic's a malformed call (20 of 20 sent). Real ``openai``
and ``anthropic`` packages over loopback; the server says what the providers say.
"""

from __future__ import annotations

import threading
from typing import Any

import anthropic
import anyio
import openai
import pytest

import gptgate as gg
from benchmarks._errorserver import error_server
from benchmarks._threadserver import QuietHandler, served
from tests.test_out_of_funds import ANTHROPIC_CREDIT, OPENAI_QUOTA

THRESHOLD = 3
USER = [{"role": "user", "content": "hi"}]


def _retry_after(value: str | None) -> dict[str, str]:
    return {} if value is None else {"retry-after": value}


def _gate(provider: str, root: str) -> gg.Gateway:
    url = root if provider == "anthropic" else f"{root}/v1"
    backend = gg.Backend(name="primary", provider=provider, base_url=url, api_key="sk-test-0",
                         model="claude-sonnet-4-5" if provider == "anthropic" else "m")
    return gg.Gateway([backend], breaker_threshold=THRESHOLD, breaker_cooldown_s=600.0,
                      max_breaker_wait_s=0.0, deadline_s=30.0)


async def _one(gate: gg.Gateway, provider: str, root: str, guarded: bool) -> None:
    if provider == "anthropic":
        claude = anthropic.AsyncAnthropic(api_key="sk-test-0", base_url=root, max_retries=0,
                                          http_client=gate.http_client("primary"))

        async def call() -> object:
            return await claude.messages.create(model="claude-sonnet-4-5", max_tokens=10,
                                                messages=USER)  # type: ignore[arg-type]
    else:
        sdk = openai.AsyncOpenAI(api_key="sk-test-0", base_url=f"{root}/v1", max_retries=0,
                                 http_client=gate.http_client("primary"))

        async def call() -> object:
            return await sdk.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    if guarded:
        await gate.guard(backend="primary", retry=False)(call)()
    else:
        await call()


CASES = [("openai", OPENAI_QUOTA, None), ("openai", OPENAI_QUOTA, "1"),
         ("anthropic", ANTHROPIC_CREDIT, None)]
IDS = ["openai-quota-429", "openai-quota-429-retry-after", "anthropic-credit-400"]


@pytest.mark.parametrize("guarded", [False, True], ids=["sdk", "guard"])
@pytest.mark.parametrize(("provider", "refusal", "retry_after"), CASES, ids=IDS)
async def test_an_sdks_empty_account_opens_the_backends_circuit(
    provider: str, refusal: tuple[int, Any], retry_after: str | None, guarded: bool
) -> None:
    with error_server(*refusal, _retry_after(retry_after)) as server:
        root = server.url
        async with _gate(provider, root) as gate:
            for _ in range(20):
                # the SDK's refusal; a guard refused at the open circuit: BackendError
                with pytest.raises((openai.APIStatusError, anthropic.APIStatusError,
                                    gg.BackendError)):
                    await _one(gate, provider, root, guarded)
            assert gate.stats()["primary"].circuit == "open"
    assert server.requests == THRESHOLD  # the rest refused unsent: the account is known empty


async def test_the_sdk_still_reads_the_servers_body() -> None:
    """The body read to classify the refusal is the one the SDK reads: its code and message
    reach the caller as the provider sent them."""
    with error_server(*OPENAI_QUOTA) as server:
        root = server.url
        async with _gate("openai", root) as gate:
            with pytest.raises(openai.RateLimitError) as caught:
                await _one(gate, "openai", root, guarded=False)
    assert caught.value.code == "insufficient_quota"
    assert "exceeded your current quota" in str(caught.value)


async def test_a_caller_cancelled_while_the_refusal_is_read_hands_its_permit_back() -> None:
    """The body is read with the permit held: a caller cancelled while it is slow to come
    (headers sent, body stalled) still ends the attempt, and nothing stays in flight."""
    release = threading.Event()

    class Stalled(QuietHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(429)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", "100")
            self.end_headers()
            self.wfile.flush()
            release.wait(10)

    with served(Stalled) as root:
        try:
            async with _gate("openai", root) as gate:
                with anyio.move_on_after(0.3) as scope:
                    await _one(gate, "openai", root, guarded=False)
                assert scope.cancelled_caught
                assert gate.stats()["primary"].in_flight == 0
        finally:
            release.set()


@pytest.mark.parametrize(("provider", "refusal", "sent"), [
    # openai 3.x adds its key in an auth flow: the request its error carries has none, so
    # whose key it was cannot be told and nothing is counted (credential_owner.py) — but it
    # is no rate limit: one request per call, not max_attempts
    ("openai", OPENAI_QUOTA, 10),
    # anthropic's request carries its key: the backend's own, counted until the circuit opens
    ("anthropic", ANTHROPIC_CREDIT, THRESHOLD),
], ids=["openai-quota-429", "anthropic-credit-400"])
async def test_a_guarded_functions_own_client_meets_it_once(
    provider: str, refusal: tuple[int, Any], sent: int
) -> None:
    """A guarded function on its own client (not ``gate.http_client``): the guard read the
    SDK's exception by its status alone — OpenAI's 429 was retried on the empty account
    (``max_attempts`` requests per call: 30 for 10 calls), and Anthropic's 400 never counted
    (10 of 10 sent, the circuit closed)."""
    with error_server(*refusal) as server:
        root = server.url
        gate = gg.Gateway([gg.Backend(name="primary", provider=provider, api_key="sk-test-0",
                                      base_url=root if provider == "anthropic" else f"{root}/v1",
                                      model="m")],
                          breaker_threshold=THRESHOLD, breaker_cooldown_s=600.0,
                          max_breaker_wait_s=0.0, max_attempts=3)
        if provider == "anthropic":
            claude = anthropic.AsyncAnthropic(api_key="sk-test-0", base_url=root, max_retries=0)

            async def call() -> object:
                return await claude.messages.create(model="m", max_tokens=10,
                                                    messages=USER)  # type: ignore[arg-type]
        else:
            sdk = openai.AsyncOpenAI(api_key="sk-test-0", base_url=f"{root}/v1", max_retries=0)

            async def call() -> object:
                return await sdk.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
        async with gate:
            guarded = gate.guard(backend="primary")(call)
            for _ in range(10):
                with pytest.raises((openai.APIStatusError, anthropic.APIStatusError,
                                    gg.BackendError)):
                    await guarded()
            stats = gate.stats()["primary"]
    assert server.requests == sent
    assert stats.circuit == ("open" if sent == THRESHOLD else "closed")
    assert stats.rate_limited == 0  # an empty account is no rate limit
