"""On the SDK path (``gate.http_client`` under the real ``openai`` / ``anthropic`` packages,
and ``@gate.guard`` around SDK calls) an error response is classified by its body, with the
dialect's ``error_for_status`` that ``gate.chat`` uses — not by its status alone.

Before, the transport classified an error by its status and headers (``b""`` for the body),
and the guard by the SDK exception's status: OpenAI's ``insufficient_quota`` 429 (an empty
account) was a rate limit — paused, retried by the SDK and the guard, never counted against
the backend's circuit; Anthropic's 400 "Your credit balance is too low" a malformed call;
Azure's 400 ``content_filter`` booked at nothing (Azure bills the prompt); OpenAI's 429
"Request too large … Limit 30000, Requested 50000" requeued and pausing the backend until the
request's deadline, though it can never fit. The SDK still reads the very bytes the server
sent. Real packages, loopback servers sending the provider's body chunked.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import anthropic
import httpx2
import openai
import pytest

import gptgate as gg
from benchmarks._errorserver import error_server
from tests.test_azure_prompt_filter_billed import FILTERED

KEY = "sk-proj-empty-account-0123456789"
USER = [{"role": "user", "content": "hi"}]
THRESHOLD = 3

OPENAI_QUOTA = {"error": {
    "message": "You exceeded your current quota, please check your plan and billing details. "
               "For more information on this error, read the docs: "
               "https://platform.openai.com/docs/guides/error-codes/api-errors.",
    "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}}
ANTHROPIC_CREDIT = {"type": "error", "error": {
    "type": "invalid_request_error",
    "message": "Your credit balance is too low to access the Anthropic API. Please go to "
               "Plans & Billing to upgrade or purchase credits."}, "request_id": "req_011"}
TOO_LARGE = {"error": {
    "message": "Request too large for gpt-4o in organization org-x on tokens per min (TPM): "
               "Limit 30000, Requested 50000. The input or output tokens must be reduced in "
               "order to run successfully.",
    "type": "tokens", "param": None, "code": "rate_limit_exceeded"}}
ANSWER = {"id": "c", "object": "chat.completion", "model": "m",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                       "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}


def _fallback(hits: Counter[str]) -> gg.Backend:
    def good(request: httpx2.Request) -> httpx2.Response:
        hits["fallback"] += 1
        return httpx2.Response(200, json=ANSWER)

    return gg.Backend(name="fallback", base_url="http://127.0.0.1:8/v1", model="m",
                      hardware="cpu", api_key="EMPTY", transport=httpx2.MockTransport(good))


def _gate(primary: gg.Backend, hits: Counter[str], **options: Any) -> gg.Gateway:
    return gg.Gateway([primary, _fallback(hits)], breaker_threshold=THRESHOLD,
                      breaker_cooldown_s=600.0, max_breaker_wait_s=0.0, deadline_s=30.0,
                      **options)


def _paused(gate: gg.Gateway, name: str) -> bool:
    return gate.backend_state(name).pacer.paused_until > gate.clock.now()


async def test_an_empty_openai_account_is_out_of_funds_not_a_rate_limit() -> None:
    """10 SDK requests (the SDK's own retries on): 3 sent, then the circuit refuses; before,
    30 were sent (each 429 retried twice by the SDK) and the circuit stayed closed."""
    hits: Counter[str] = Counter()
    with error_server(429, OPENAI_QUOTA) as server:
        primary = gg.Backend(name="primary", base_url=server.url + "/v1", model="gpt-4o-mini",
                             api_key=KEY, hardware="tpu")
        async with _gate(primary, hits) as gate:
            sdk = openai.AsyncOpenAI(api_key=KEY, base_url=server.url + "/v1", max_retries=2,
                                     http_client=gate.http_client("primary"))
            errors: list[openai.APIStatusError] = []
            for _ in range(10):
                with pytest.raises(openai.APIStatusError) as caught:
                    await sdk.chat.completions.create(model="gpt-4o-mini", messages=USER)
                errors.append(caught.value)
            stats = gate.stats()["primary"]
            paused = _paused(gate, "primary")
            routed = await gate.chat(USER)
    assert server.requests == THRESHOLD and stats.circuit == "open"
    assert [e.status_code for e in errors] == [429] * THRESHOLD + [503] * (10 - THRESHOLD)
    assert errors[0].code == "insufficient_quota"  # the SDK read the server's own bytes
    assert errors[0].body == OPENAI_QUOTA["error"]
    assert "out of funds" in str(errors[-1])  # the circuit's refusal names its cause
    assert not paused and stats.rate_limited == 0  # not a busy backend
    assert routed.backend == "fallback"


async def test_a_spent_anthropic_credit_balance_opens_the_circuit() -> None:
    hits: Counter[str] = Counter()
    with error_server(400, ANTHROPIC_CREDIT) as server:
        primary = gg.Backend(name="primary", provider="anthropic", base_url=server.url,
                             model="claude-sonnet-4-5", api_key=KEY, hardware="tpu")
        async with _gate(primary, hits) as gate:
            sdk = anthropic.AsyncAnthropic(api_key=KEY, base_url=server.url, max_retries=0,
                                           http_client=gate.http_client("primary"))
            statuses = []
            for _ in range(10):
                with pytest.raises(anthropic.APIStatusError) as caught:
                    await sdk.messages.create(model="claude-sonnet-4-5", max_tokens=16,
                                              messages=USER)  # type: ignore[arg-type]
                statuses.append(caught.value.status_code)
            circuit = gate.stats()["primary"].circuit
    assert server.requests == THRESHOLD and circuit == "open"  # 10 and closed before
    assert statuses == [400] * THRESHOLD + [503] * (10 - THRESHOLD)


async def test_an_azure_filtered_prompt_is_booked_on_the_sdk_path() -> None:
    """Azure bills the prompt its filter evaluated: booked as ``gate.chat`` books it (its
    prompt, estimated), not counted against the deployment. Before: $0, 0 tokens."""
    price = gg.Price(input_per_mtok=2.5, output_per_mtok=10.0)
    prompt = [{"role": "user", "content": "a prompt the filter refuses " * 40}]
    with error_server(400, FILTERED) as server:
        az = gg.Backend(name="az", provider="azure", base_url=server.url, deployment="gpt-4o",
                        api_key=KEY, price=price)
        async with gg.Gateway([az], breaker_threshold=THRESHOLD) as gate:
            sdk = openai.AsyncAzureOpenAI(
                api_key=KEY, azure_endpoint=server.url, api_version="2024-10-21",
                max_retries=0, http_client=gate.http_client("az"),
            )
            for _ in range(5):
                with pytest.raises(openai.BadRequestError) as caught:
                    await sdk.chat.completions.create(model="gpt-4o", messages=prompt)
                assert caught.value.code == "content_filter"
            entry = gate.ledger.entries["az"]
            circuit = gate.stats()["az"].circuit
    assert server.requests == 5 and circuit == "closed"
    assert 200 <= entry.input_tokens / 5 <= 320 and entry.output_tokens == 0  # ~250 each
    assert entry.cost_usd == pytest.approx(entry.input_tokens * 2.5 / 1e6)


async def test_a_request_too_large_for_the_whole_budget_is_not_requeued() -> None:
    """OpenAI's 429 for a request larger than the whole TPM budget carries a retry-after,
    but waiting never makes it fit: one request, no pause of the backend. Before, the
    transport requeued it after each retry-after until the request's deadline, pausing the
    backend for every other caller meanwhile."""
    with error_server(429, TOO_LARGE, {"retry-after": "1"}) as server:
        primary = gg.Backend(name="primary", base_url=server.url + "/v1", model="gpt-4o",
                             api_key=KEY)
        async with gg.Gateway([primary], deadline_s=4.0) as gate:
            sdk = openai.AsyncOpenAI(api_key=KEY, base_url=server.url + "/v1", max_retries=0,
                                     http_client=gate.http_client("primary"))
            with pytest.raises(openai.RateLimitError) as caught:
                await sdk.chat.completions.create(model="gpt-4o", messages=USER)
            paused = _paused(gate, "primary")
    assert server.requests == 1 and not paused
    assert caught.value.body == TOO_LARGE["error"]


@pytest.mark.parametrize("own_client", [True, False], ids=["own-client", "http_client"])
async def test_a_guarded_sdk_call_on_an_empty_account_is_tried_once(own_client: bool) -> None:
    """``@gate.guard`` reads the SDK exception's body too: one try, not a rate limit to retry
    (3 tries each before), no pause. On ``gate.http_client`` the circuit opens; on the SDK's
    own client the request the exception carries has no key to see (the openai package
    keeps it off), so whose account it was is unknown and no backend is blamed
    (gptgate/credential_owner.py)."""
    hits: Counter[str] = Counter()
    with error_server(429, OPENAI_QUOTA) as server:
        primary = gg.Backend(name="primary", base_url=server.url + "/v1", model="gpt-4o-mini",
                             api_key=KEY, hardware="tpu")
        async with _gate(primary, hits, max_attempts=3) as gate:
            client = None if own_client else gate.http_client("primary")
            sdk = openai.AsyncOpenAI(api_key=KEY, base_url=server.url + "/v1", max_retries=0,
                                     http_client=client)

            @gate.guard(backend="primary")
            async def ask() -> str:
                answer = await sdk.chat.completions.create(model="gpt-4o-mini", messages=USER)
                return answer.choices[0].message.content or ""

            for _ in range(THRESHOLD):
                with pytest.raises(openai.APIStatusError) as caught:
                    await ask()
                assert caught.value.status_code == 429
            stats = gate.stats()["primary"]
            paused = _paused(gate, "primary")
    assert server.requests == THRESHOLD  # 9 before: each call tried 3 times
    assert stats.circuit == ("closed" if own_client else "open") and not paused
    assert stats.rate_limited == 0


async def test_an_error_body_larger_than_the_read_reaches_the_sdk_whole() -> None:
    """gptgate reads at most the first 64 KiB of an error body to classify it; the SDK still
    reads every byte the server sent."""
    big = {"error": {"message": "x" * 300_000, "type": "server_error", "code": None}}
    with error_server(400, big) as server:
        primary = gg.Backend(name="primary", base_url=server.url + "/v1", model="m",
                             api_key=KEY)
        async with gg.Gateway([primary]) as gate:
            sdk = openai.AsyncOpenAI(api_key=KEY, base_url=server.url + "/v1", max_retries=0,
                                     http_client=gate.http_client("primary"))
            with pytest.raises(openai.BadRequestError) as caught:
                await sdk.chat.completions.create(model="m", messages=USER)
    assert caught.value.response.content == json.dumps(big).encode()


async def test_a_200_whose_body_is_an_error_is_a_failure_on_the_sdk_path() -> None:
    """A proxy's (OpenRouter's) 200 carrying ``{"error": …}``: ``gate.chat`` reads it as the
    error it names (``load_answer``), a failure of the backend's. On the SDK path it was a
    success that reset the circuit's count: 10 sent to a backend whose upstream was down,
    circuit closed. Now 3, as on ``gate.chat``."""
    upstream_down = {"error": {"message": "Upstream error from provider", "code": 502}}
    with error_server(200, upstream_down) as server:
        primary = gg.Backend(name="primary", base_url=server.url + "/v1", model="m",
                             api_key=KEY)
        async with gg.Gateway([primary], breaker_threshold=THRESHOLD,
                              breaker_cooldown_s=600.0, max_breaker_wait_s=0.0) as gate:
            sdk = openai.AsyncOpenAI(api_key=KEY, base_url=server.url + "/v1", max_retries=0,
                                     http_client=gate.http_client("primary"))
            for _ in range(10):
                try:
                    await sdk.chat.completions.create(model="m", messages=USER)
                except openai.APIStatusError as error:
                    assert error.status_code == 503  # the open circuit's refusal
            stats = gate.stats()["primary"]
    assert server.requests == THRESHOLD and stats.circuit == "open"
    assert stats.failures == THRESHOLD


def test_the_sync_sdk_on_a_sync_gateway_reads_the_same_body() -> None:
    """``SyncGateway.http_client`` under ``openai.OpenAI``: the same transport, the same
    classification, the SDK's own retries held (``x-should-retry: false``)."""
    with error_server(429, OPENAI_QUOTA) as server, gg.SyncGateway(
        [gg.Backend(name="primary", base_url=server.url + "/v1", model="m", api_key=KEY)],
        breaker_threshold=THRESHOLD, breaker_cooldown_s=600.0, max_breaker_wait_s=0.0,
    ) as gate:
        sdk = openai.OpenAI(api_key=KEY, base_url=server.url + "/v1", max_retries=2,
                            http_client=gate.http_client("primary"))
        seen = []
        for _ in range(6):
            with pytest.raises(openai.APIStatusError) as caught:
                sdk.chat.completions.create(model="m", messages=USER)
            seen.append((caught.value.status_code, caught.value.code))
        circuit = gate.stats()["primary"].circuit
    assert server.requests == THRESHOLD and circuit == "open"
    assert seen == [(429, "insufficient_quota")] * THRESHOLD + [(503, None)] * THRESHOLD
