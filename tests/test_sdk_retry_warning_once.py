"""The "SDK retries on its own" warning is said once per backend, not once per
``gate.http_client(...)``: a web app that builds its SDK client in each request handler
(common in Flask and FastAPI code) logged one identical WARNING line per request while the
backend failed — 50 requests, 50 lines; at 10,000 requests a minute, a log flood in the
middle of the incident it should help with."""

from __future__ import annotations

import logging

import httpx2
import openai
import pytest

import gptgate as gg

WARNING = "retries on its own"


def _refusing(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(500, json={"error": {"message": "boom"}})


def _backend(name: str) -> gg.Backend:
    return gg.Backend(name=name, base_url="http://127.0.0.1:9/v1", model="m", api_key="EMPTY",
                      transport=httpx2.MockTransport(_refusing))


async def test_one_warning_per_backend_however_many_clients(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = gg.Gateway([_backend("a"), _backend("b")], breaker_threshold=1000,
                      backoff_base_s=0.001, backoff_cap_s=0.001)
    caplog.set_level(logging.WARNING, logger="gptgate")
    async with gate:
        for name in ("a", "b"):
            for _ in range(5):  # a client per request, as a request handler builds it
                client = openai.AsyncOpenAI(
                    base_url="http://127.0.0.1:9/v1", api_key="EMPTY",
                    http_client=gate.http_client(name), max_retries=1,
                )
                with pytest.raises(openai.APIStatusError):
                    await client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "hi"}]
                    )
    said = [r.getMessage() for r in caplog.records if WARNING in r.getMessage()]
    assert len(said) == 2  # one per backend (was 10: one per client)
    assert any("'a'" in m for m in said) and any("'b'" in m for m in said)
