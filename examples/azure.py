"""Azure OpenAI: ``Backend(provider="azure", deployment=..., api_version=...)``, the official
``AsyncAzureOpenAI`` SDK on the gateway's client, and a 429 burst on Azure's short windows.

What it shows
    * ``gg.Backend(provider="azure", base_url="https://RES.openai.azure.com",
      deployment="gpt-4o-prod")``: requests go to
      ``/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21`` with the key
      in an ``api-key`` header (``api_key=None`` reads ``AZURE_OPENAI_API_KEY``);
    * a wrong deployment name answered 404 "Resource not found" becomes an error that says
      what to check;
    * 60 calls at once into a deployment that takes 10 requests a second (Azure enforces RPM
      over 1 s windows): no call fails. Only the calls already on their way when the first
      429 comes back are refused together (here at most 2); after it the held calls go one
      ``retry-after-ms`` apart, so no 429 follows another;
    * ``openai.AsyncAzureOpenAI(http_client=gate.http_client("azure"))`` over loopback HTTP:
      the SDK's requests share the backend's limit, and its tokens and dollars are in the
      ledger, equal to what the server billed.

How to run
    python examples/azure.py

No Azure account, no network: the server is gptgate's simulator with its Azure flavor
(``SimProfile(flavor="azure")``: Azure's paths, ``api-key`` check, headers and 1 s RPM
window), first in this process in virtual time (``run_virtual``: the same burst on every
run), then over loopback HTTP (``SimServer``) 20x faster than real time, with the gateway
on real time as in production. Against your resource: drop ``transport=`` and ``clock=``
(the in-process part's virtual clock), put your endpoint in ``base_url`` (or
``AZURE_OPENAI_ENDPOINT``) and export ``AZURE_OPENAI_API_KEY`` — or pass
``azure_ad_token_provider=`` (azure-identity's ``get_bearer_token_provider(...)``).
"""

from __future__ import annotations

import asyncio
import textwrap

import httpx2
import openai

import gptgate as gg
from gptgate.sim import LoopClock, SimEngine, SimServer, SimTransport, get_profile, run_virtual

SCALE = 20.0
KEY = "example-azure-key-0001"  # the simulated resource's key (yours: AZURE_OPENAI_API_KEY)
PRICE = gg.Price(input_per_mtok=2.5, cached_input_per_mtok=1.25, output_per_mtok=10.0)
DEPLOYMENT = "gpt-4o-prod"
PROFILE = get_profile("gpu").model_copy(update={
    "flavor": "azure", "model": DEPLOYMENT, "api_key": KEY, "max_queue": None,
    "rpm": 600, "rpm_window_s": 1.0, "tpm": None, "output_tokens_mean": 40.0,
})
QUESTION = [{"role": "user", "content": "In one sentence: what is an Azure deployment?"}]


class Counting(httpx2.AsyncBaseTransport):
    """Notes each answer's status in the order the requests were sent."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner, self.statuses = inner, []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.statuses.append(0)
        index = len(self.statuses) - 1
        response = await self.inner.handle_async_request(request)
        self.statuses[index] = response.status_code
        return response


def longest_run_of_429s(statuses: list[int]) -> int:
    best = run = 0
    for status in statuses:
        run = run + 1 if status == 429 else 0
        best = max(best, run)
    return best


async def in_process() -> None:
    clock = LoopClock()  # virtual time (run_virtual): the burst is the same on every run
    engine = SimEngine(PROFILE, clock=clock, seed=7)
    counting = Counting(SimTransport(engine))
    backend = gg.Backend(
        name="azure", provider="azure", base_url="https://example-res.openai.azure.com",
        deployment=DEPLOYMENT, api_key=KEY, concurrency=16, price=PRICE, transport=counting,
    )
    typo = backend.model_copy(update={"name": "typo", "deployment": "gpt-4o-prd"})
    async with gg.Gateway([backend, typo], clock=clock, seed=7) as gate:
        result = await gate.chat(QUESTION, max_tokens=40, backend="azure")
        print(f"chat   -> {result.text[:60]!r}... ({result.usage.input_tokens} in, "
              f"{result.usage.output_tokens} out, ${result.cost_usd:.6f})")
        try:
            await gate.chat(QUESTION, max_tokens=40, backend="typo")
        except gg.BadRequestError as error:
            said, _, hint = error.message.partition("; ")
            print(textwrap.fill(said, 92, initial_indent="typo   -> ", subsequent_indent=" " * 10))
            print(textwrap.fill(hint, 92, initial_indent=" " * 10, subsequent_indent=" " * 10))

        counting.statuses.clear()
        items = [{"messages": [{"role": "user", "content": f"Tip #{i} for prompts?"}],
                  "max_tokens": 30, "backend": "azure"} for i in range(60)]
        results = await gate.map(items)
        failed = sum(isinstance(r, BaseException) for r in results)
        print(f"burst  -> 60 calls into a 10 req/s deployment: {failed} failed, "
              f"{counting.statuses.count(429)} answered 429, "
              f"longest run of 429s {longest_run_of_429s(counting.statuses)}")


async def with_the_sdk(root: str, engine: SimEngine) -> None:
    backend = gg.Backend(
        name="azure", provider="azure", base_url=root, deployment=DEPLOYMENT, api_key=KEY,
        concurrency=4, price=PRICE,
    )
    # real time, as in production: only the server is 20x fast, and the gateway's timeouts
    # stay real seconds a busy machine cannot mistake for a hung server
    async with gg.Gateway([backend], seed=7) as gate:
        client = openai.AsyncAzureOpenAI(
            azure_endpoint=root, api_key=KEY, api_version="2024-10-21",
            http_client=gate.http_client("azure"), max_retries=0,
        )
        answers = await asyncio.gather(*(
            client.chat.completions.create(model=DEPLOYMENT, messages=QUESTION, max_tokens=30)
            for _ in range(8)
        ))
        assert all(a.choices[0].message.content for a in answers)
        stats, server = gate.stats()["azure"], engine.ledger.snapshot()
        print(f"sdk    -> {stats.calls} AsyncAzureOpenAI calls through the gateway "
              f"({stats.failures} failed), ledger {stats.input_tokens + stats.output_tokens} "
              f"tokens ${stats.cost_usd:.5f}, server billed "
              f"{server.billed_tokens} tokens ${server.billed_usd(PRICE):.5f}")


def main() -> None:
    run_virtual(in_process)
    engine = SimEngine(PROFILE.model_copy(update={"rpm": None}), clock=gg.ScaledClock(SCALE))
    with SimServer(engine, time_scale=SCALE) as base_url:
        asyncio.run(with_the_sdk(base_url.removesuffix("/v1"), engine))


if __name__ == "__main__":
    main()
