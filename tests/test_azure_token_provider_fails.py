"""An Entra ID token provider that raises — ``DefaultAzureCredential`` with no credential
configured, a managed-identity endpoint that times out, an expired ``az login`` — is the
backend's failure, like a key Azure refuses: a typed error naming the provider, nothing sent,
the call moved to another backend and the backend's circuit counting it. Before, the
provider's own exception (a ``RuntimeError``, azure-identity's ``ClientAuthenticationError``)
came out of ``gate.chat`` as it was: not a ``GateError``, never moved — with a healthy
fallback configured, 10 of 10 calls failed — and never counted, so every call asked the
failing credential again."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

import gptgate as gg

from .mockbackend import Script, ok

USER = [{"role": "user", "content": "Summarise the incident report."}]


class CredentialUnavailable(Exception):
    """Stands in for azure-identity's ``CredentialUnavailableError``."""


class FailingCredential:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        raise CredentialUnavailable(
            "DefaultAzureCredential failed to retrieve a token from the included credentials.")


def _azure(provider: Any, sent: list[dict[str, Any]]) -> gg.Backend:
    def answer(request: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(request.content))
        return httpx2.Response(200, json={
            "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-2024-11-20",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "Done."}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
        })

    return gg.Backend(name="az", provider="azure", base_url="https://res.openai.azure.com",
                      deployment="gpt-4o", azure_ad_token_provider=provider,
                      price=gg.Price(input_per_mtok=1.0, output_per_mtok=1.0),
                      transport=httpx2.MockTransport(answer))


async def test_a_failing_token_provider_is_a_typed_error_and_nothing_is_sent() -> None:
    credential, sent = FailingCredential(), []
    async with gg.Gateway([_azure(credential, sent)]) as gate:
        with pytest.raises(gg.BadRequestError) as info:
            await gate.chat(USER, max_tokens=20)
    error = info.value
    assert error.status == 401 and error.backend == "az" and error.unsent
    assert "azure_ad_token_provider" in error.message
    assert "CredentialUnavailable" in error.message and "DefaultAzureCredential" in error.message
    assert isinstance(error.__cause__, CredentialUnavailable)
    assert sent == []


async def test_async_provider_returning_nothing_is_the_same_typed_error() -> None:
    async def empty() -> str:
        return ""

    sent: list[dict[str, Any]] = []
    async with gg.Gateway([_azure(empty, sent)]) as gate:
        with pytest.raises(gg.BadRequestError, match="returned no token") as info:
            await gate.chat(USER, max_tokens=20)
    assert info.value.status == 401 and sent == []


async def test_with_a_fallback_every_call_is_answered_and_the_circuit_counts_it() -> None:
    """The Azure deployment is the cheaper backend: the router would choose it first."""
    credential, sent = FailingCredential(), []
    script = Script(ok("Done."))
    other = gg.Backend(name="oai", provider="openai", model="gpt-4o", api_key="sk-test",
                       price=gg.Price(input_per_mtok=50.0, output_per_mtok=50.0),
                       transport=httpx2.MockTransport(script))
    async with gg.Gateway([_azure(credential, sent), other]) as gate:
        results = [await gate.chat(USER, max_tokens=20) for _ in range(10)]
        stats = gate.stats()["az"]
    assert [r.backend for r in results] == ["oai"] * 10
    assert sent == [] and len(script.requests) == 10
    assert stats.failures >= 1
    assert credential.calls < 10  # the open circuit stops asking the credential every call
