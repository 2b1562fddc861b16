"""An account out of funds is the backend's failure, not the call's: it fails over and opens
the backend's circuit, as a refused key does (tests/test_credential_failover.py).

Each provider says it its own way (the bodies are theirs, as their docs and users' reports
show them): DeepSeek a 402 "Insufficient Balance"; Anthropic a 400 ``invalid_request_error``
"Your credit balance is too low to access the Anthropic API", or a 402 ``billing_error``;
OpenAI a 429 ``insufficient_quota`` "You exceeded your current quota". Every call sent there
fails the same way until someone tops the account up.

Before: the 402 and the 400 were ``BadRequestError`` like a malformed call, never moved and
never counted against the backend — with a healthy fallback, 20 of 20 calls failed and the
fallback got none; the 429 was a retryable ``RateLimitedError``, retried on the dead account
(3 requests for one call), pausing it and narrowing its limit as if it were busy.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import httpx2
import pytest

import gptgate as gg
from gptgate.wire.openai import error_for_status

ANSWER = {"id": "c", "object": "chat.completion", "model": "m",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                       "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}
MESSAGES = [{"role": "user", "content": "hi"}]

DEEPSEEK_402 = (402, {"error": {"message": "Insufficient Balance", "type": "unknown_error",
                                "param": None, "code": "invalid_request_error"}})
ANTHROPIC_CREDIT = (400, {"type": "error", "error": {
    "type": "invalid_request_error",
    "message": "Your credit balance is too low to access the Anthropic API. Please go to "
               "Plans & Billing to upgrade or purchase credits."}, "request_id": "req_011"})
ANTHROPIC_402 = (402, {"type": "error", "error": {"type": "billing_error",
                                                  "message": "Billing issue."}})
OPENAI_QUOTA = (429, {"error": {
    "message": "You exceeded your current quota, please check your plan and billing details. "
               "For more information on this error, read the docs: "
               "https://platform.openai.com/docs/guides/error-codes/api-errors.",
    "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}})

PRIMARY = {
    "deepseek": dict(provider="deepseek", model="deepseek-chat",
                     base_url="http://127.0.0.1:9"),
    "anthropic": dict(provider="anthropic", model="claude-sonnet-4-5",
                      base_url="http://127.0.0.1:9"),
    "openai": dict(provider="openai", model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1"),
}
REFUSALS = [("deepseek", DEEPSEEK_402), ("anthropic", ANTHROPIC_CREDIT),
            ("anthropic", ANTHROPIC_402), ("openai", OPENAI_QUOTA)]
IDS = ["deepseek-402", "anthropic-credit-400", "anthropic-402", "openai-quota-429"]


def _primary(hits: Counter[str], provider: str, refusal: tuple[int, Any]) -> gg.Backend:
    def broke(request: httpx2.Request) -> httpx2.Response:
        hits["primary"] += 1
        return httpx2.Response(refusal[0], json=refusal[1])

    # the faster tier, so the router prefers it while its circuit is closed
    return gg.Backend(name="primary", api_key="sk-test", hardware="tpu",
                      transport=httpx2.MockTransport(broke), **PRIMARY[provider])


def _fallback(hits: Counter[str]) -> gg.Backend:
    def good(request: httpx2.Request) -> httpx2.Response:
        hits["fallback"] += 1
        return httpx2.Response(200, json=ANSWER)

    return gg.Backend(name="fallback", base_url="http://127.0.0.1:8/v1", model="m",
                      hardware="cpu", api_key="EMPTY", transport=httpx2.MockTransport(good))


@pytest.mark.parametrize(("provider", "refusal"), REFUSALS, ids=IDS)
async def test_an_account_out_of_funds_fails_over_and_opens_its_circuit(
    provider: str, refusal: tuple[int, Any]
) -> None:
    hits: Counter[str] = Counter()
    gate = gg.Gateway([_primary(hits, provider, refusal), _fallback(hits)],
                      breaker_threshold=3, breaker_cooldown_s=60.0)
    async with gate:
        results = [await gate.chat(MESSAGES) for _ in range(20)]
        stats = gate.stats()
    assert {r.backend for r in results} == {"fallback"} and hits["fallback"] == 20
    assert 1 <= hits["primary"] <= 3  # at most until its circuit opens
    assert stats["fallback"].retries == hits["primary"]  # the moves, free of the retry budget


@pytest.mark.parametrize(("provider", "refusal"), REFUSALS, ids=IDS)
async def test_alone_it_is_one_request_and_a_typed_refusal_not_retried(
    provider: str, refusal: tuple[int, Any]
) -> None:
    hits: Counter[str] = Counter()
    async with gg.Gateway([_primary(hits, provider, refusal)], max_attempts=3) as gate:
        with pytest.raises(gg.OutOfFundsError) as caught:
            await gate.chat(MESSAGES)
    assert hits["primary"] == 1 and isinstance(caught.value, gg.BadRequestError)
    assert not caught.value.retryable and caught.value.status == refusal[0]
    assert "out of funds" in caught.value.message  # says what to do about it


async def test_its_refusals_open_the_circuit_and_later_calls_are_not_sent() -> None:
    hits: Counter[str] = Counter()
    gate = gg.Gateway([_primary(hits, "deepseek", DEEPSEEK_402)], breaker_threshold=3,
                      breaker_cooldown_s=60.0, max_breaker_wait_s=0.0)
    async with gate:
        for _ in range(3):
            with pytest.raises(gg.OutOfFundsError):
                await gate.chat(MESSAGES)
        with pytest.raises(gg.BackendError):  # not sent: the account is known empty
            await gate.chat(MESSAGES)
        assert gate.stats()["primary"].circuit == "open"
    assert hits == {"primary": 3}


async def test_a_plain_bad_request_still_blames_the_call() -> None:
    hits: Counter[str] = Counter()
    bad = (400, {"error": {"message": "Invalid value for 'temperature'",
                           "type": "invalid_request_error", "code": None}})
    gate = gg.Gateway([_primary(hits, "openai", bad), _fallback(hits)], breaker_threshold=3)
    async with gate:
        with pytest.raises(gg.BadRequestError):
            await gate.chat(MESSAGES)
        assert gate.stats()["primary"].circuit == "closed"
    assert hits == {"primary": 1}


def test_geminis_per_minute_quota_is_still_a_rate_limit() -> None:
    """Gemini's 429 also says "You exceeded your current quota", of its per-minute limit,
    which waiting clears: read by its code, not its words, it stays a RateLimitedError."""
    body = [{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message":
                       "You exceeded your current quota, please check your plan and billing "
                       "details. For more information on this error, head to: "
                       "https://ai.google.dev/gemini-api/docs/rate-limits."}}]
    error = error_for_status(429, {"retry-after": "7"}, json.dumps(body).encode(), backend="g")
    assert type(error) is gg.RateLimitedError and error.retryable and error.retry_after == 7
