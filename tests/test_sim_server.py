"""The same engine over real loopback HTTP (uvicorn in a background thread)."""

from __future__ import annotations

import json
import time

import anyio
import httpx2
import pytest

from gptgate.clock import ScaledClock
from gptgate.sim import SimEngine, SimServer

MESSAGES = [{"role": "user", "content": "hello over the wire"}]
STREAM = {"messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}


def _wait_for(predicate: object, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return True
        time.sleep(0.01)
    return False


def test_json_and_streaming_over_loopback() -> None:
    engine = SimEngine("gpu", clock=ScaledClock(100), seed=4)
    with SimServer(engine) as base_url:
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")

        async def main() -> tuple[httpx2.Response, list[str], httpx2.Response]:
            async with httpx2.AsyncClient(base_url=base_url) as client:
                plain = await client.post("/chat/completions", json={"messages": MESSAGES})
                async with client.stream("POST", "/chat/completions", json=STREAM) as r:
                    chunks = [c async for c in r.aiter_text()]
                models = await client.get("/models")
            return plain, chunks, models

        plain, chunks, models = anyio.run(main)
    assert plain.status_code == 200
    assert plain.json()["object"] == "chat.completion"
    assert plain.headers["x-request-id"]
    events = [e for e in "".join(chunks).split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[-2][len("data: ") :])["choices"] == []
    assert len(chunks) > 1  # arrived over time, not as one buffered body
    assert models.json()["data"][0]["id"] == engine.profile.model
    ledger = engine.ledger.snapshot()
    assert ledger.ok == 2 and ledger.output_tokens > 0


def test_each_request_has_its_own_bill_over_http() -> None:
    """The bill request by request (``GET /v1/sim/ledger/requests``): each admitted chat
    request's id, its last user message's first characters, how it ended and its tokens —
    summing to the ledger's totals."""
    engine = SimEngine("gpu", clock=ScaledClock(100), seed=4)
    engine.ledger.keep_bills()  # off by default: memory that grows with the run
    with SimServer(engine) as base_url:

        async def main() -> tuple[list[str], list[dict[str, object]]]:
            async with httpx2.AsyncClient(base_url=base_url) as client:
                ids = []
                for i in range(2):
                    asked = [{"role": "system", "content": "brief"},
                             {"role": "user", "content": f"question {i}"}]
                    r = await client.post("/chat/completions", json={"messages": asked})
                    ids.append(r.headers["x-request-id"])
                bills = (await client.get("/sim/ledger/requests")).json()
            return ids, bills

        ids, bills = anyio.run(main)
    total = engine.ledger.snapshot()
    assert [b["request_id"] for b in bills] == ids
    assert [b["prompt"] for b in bills] == ["question 0", "question 1"]
    assert [b["outcome"] for b in bills] == ["ok", "ok"]
    assert sum(b["input_tokens"] for b in bills) == total.input_tokens  # type: ignore[misc]
    assert sum(b["output_tokens"] for b in bills) == total.output_tokens  # type: ignore[misc]


def test_client_disconnect_is_billed_as_abandoned() -> None:
    engine = SimEngine("gpu", clock=ScaledClock(10))
    body = {"messages": MESSAGES, "stream": True, "max_tokens": 2000}
    with SimServer(engine) as base_url:

        async def main() -> None:
            async with (
                httpx2.AsyncClient(base_url=base_url) as client,
                client.stream("POST", "/chat/completions", json=body) as r,
            ):
                async for _ in r.aiter_raw():
                    break

        anyio.run(main)
        assert _wait_for(lambda: engine.ledger.snapshot().abandoned == 1)
        assert _wait_for(lambda: engine.snapshot().active == 0)
    ledger = engine.ledger.snapshot()
    assert ledger.input_tokens > 0 and 0 < ledger.output_tokens < 2000


def test_reset_fault_drops_the_connection() -> None:
    with SimServer("gpu", time_scale=100) as base_url:

        async def main() -> None:
            async with httpx2.AsyncClient(base_url=base_url) as client:
                with pytest.raises(httpx2.TransportError):
                    async with client.stream(
                        "POST", "/chat/completions", json=STREAM, headers={"x-sim-fault": "reset"}
                    ) as r:
                        async for _ in r.aiter_raw():
                            pass
                # the server is still up for the next request
                ok = await client.post("/chat/completions", json={"messages": MESSAGES})
                assert ok.status_code == 200

        anyio.run(main)


def test_server_stops_cleanly_and_frees_the_port() -> None:
    server = SimServer("cpu", time_scale=100)
    with server as base_url:
        port = int(base_url.split(":")[2].split("/")[0])
    assert server.base_url == base_url
    with SimServer("cpu", time_scale=100, port=port) as again:  # the port is free again
        assert again == base_url
