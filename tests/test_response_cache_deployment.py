"""The response-cache key names an Azure deployment: two deployments under one model name
are two models, and share no answer.

Found with two gateways on one ``shared=`` Redis, each with ``Backend(name="az",
provider="azure", model="gpt-4o")`` — one on deployment ``gpt-4o-prod``, the other on a
canary ``gpt-4o-mini-canary`` (``model=`` is a label at Azure: the deployment answers). The
key hashed the backends' tier and model only, so the canary served the production
deployment's answer from Redis and sent nothing. Chosen: the key adds a deployment named
otherwise than its model; every backend without one (or with one named as its model) keys
as before, so an Azure deployment ``gpt-4o`` shares answers with OpenAI's ``gpt-4o``, two
regions with the same deployment name share theirs, and no existing cache goes cold."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import anyio

import gptgate as gg
from gptgate.response_cache import request_key
from gptgate.sim import SimEngine, get_profile
from tests.fleettools import namespace
from tests.test_response_cache import ROOMY_S, Counting, M

KEY = "azure-key-0123456789abcdef"
PRICE = gg.Price(input_per_mtok=2.5, output_per_mtok=10.0)


def _azure(deployment: str, base_url: str = "https://east.openai.azure.com",
           **options: Any) -> gg.Backend:
    return gg.Backend(name="az", provider="azure", base_url=base_url, deployment=deployment,
                      model="gpt-4o", api_key=KEY, price=PRICE, **options)


def test_two_deployments_under_one_model_name_are_two_keys() -> None:
    ask: dict[str, Any] = {"temperature": 0}
    prod, canary = _azure("gpt-4o-prod"), _azure("gpt-4o-mini-canary")
    assert request_key([prod], M, ask) != request_key([canary], M, ask)
    assert request_key([prod], M, ask, backend="az") != request_key(
        [canary], M, ask, backend="az")
    # not split needlessly: the same deployment in another region, a deployment named as
    # its model beside OpenAI's model of that name
    west = _azure("gpt-4o-prod", base_url="https://west.openai.azure.com")
    assert request_key([prod], M, ask) == request_key([west], M, ask)
    openai = gg.Backend(name="oa", base_url="https://api.openai.com/v1", model="gpt-4o",
                        price=PRICE)
    assert request_key([_azure("gpt-4o")], M, ask) == request_key([openai], M, ask)


def test_a_backend_without_a_deployment_keys_as_before() -> None:
    """No cache goes cold on upgrade: the key of every backend without a deployment is the
    hash of the same document as before."""
    backend = gg.Backend(name="oa", base_url="https://api.openai.com/v1", model="gpt-4o")
    document = {"reach": [[backend.tier, "gpt-4o"]], "tier": "auto", "backend": None,
                "private": False, "messages": M, "params": {"temperature": 0}}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert request_key([backend], M, {"temperature": 0}) == hashlib.sha256(
        text.encode()).hexdigest()


def test_a_canary_deployment_is_not_served_the_production_answer(redis_url: str) -> None:
    space = namespace()

    async def main() -> None:
        def engine(deployment: str) -> Counting:
            profile = get_profile("gpu").model_copy(update={
                "flavor": "azure", "api_key": KEY, "model": deployment, "rpm": None,
                "tpm": None, "max_queue": None, "output_tokens_mean": 40.0})
            return Counting(SimEngine(profile, seed=3))

        prod, canary = engine("gpt-4o-prod"), engine("gpt-4o-mini-canary")

        def gate(deployment: str, counting: Counting) -> gg.Gateway:
            shared = gg.Shared(redis_url, namespace=space, op_budget_s=ROOMY_S)
            backend = _azure(deployment, base_url="http://127.0.0.1:8000",
                             transport=counting)
            return gg.Gateway([backend], response_cache=gg.ResponseCache(
                ttl_s=3600, shared=shared))

        ask: dict[str, Any] = {"temperature": 0, "max_tokens": 20}
        one, two = gate("gpt-4o-prod", prod), gate("gpt-4o-mini-canary", canary)
        again = gate("gpt-4o-prod", prod)  # a second process on the production deployment
        async with one, two, again:
            first = await one.chat(M, **ask)
            assert not first.from_cache
            other = await two.chat(M, **ask)
            assert not other.from_cache, "the canary was served the production answer"
            assert (await again.chat(M, **ask)).from_cache  # shared where it is the same
        assert (prod.requests, canary.requests) == (1, 1)

    anyio.run(main)
