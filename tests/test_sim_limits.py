"""Rate limits, queue limits and their headers, as a gateway will read them."""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import anyio.lowlevel
import httpx2
import pytest

from gptgate.sim import LoopClock, SimEngine, SimProfile, SimTransport, get_profile, run_virtual
from gptgate.sim.ratelimit import format_duration

MESSAGES = [{"role": "user", "content": "hello"}]
GO_DURATION = re.compile(r"^(\d+h)?(\d+m)?(\d+(\.\d+)?s)?$|^\d+ms$")


def _client(engine: SimEngine) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=SimTransport(engine), base_url="http://sim/v1")


def _profile(name: str, **update: Any) -> SimProfile:
    return get_profile(name).model_copy(update=update)


def _seconds(duration: str) -> float:
    if duration.endswith("ms"):
        return float(duration[:-2]) / 1000
    total = 0.0
    for value, unit in re.findall(r"([\d.]+)([hms])", duration):
        total += float(value) * {"h": 3600, "m": 60, "s": 1}[unit]
    return total


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0, "0s"), (0.02, "20ms"), (1.0, "1s"), (1.5, "1.5s"), (360.0, "6m0s"), (3723.0, "1h2m3s")],
)
def test_reset_durations_are_formatted_like_openai(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_rpm_limit_answers_429_with_parseable_headers() -> None:
    async def main() -> tuple[list[httpx2.Response], httpx2.Response]:
        engine = SimEngine(_profile("gpu", rpm=3), clock=LoopClock())
        async with _client(engine) as client:
            rs = [
                await client.post("/chat/completions", json={"messages": MESSAGES})
                for _ in range(4)
            ]
            await anyio.sleep(int(rs[-1].headers["retry-after-ms"]) / 1000)
            later = await client.post("/chat/completions", json={"messages": MESSAGES})
        return rs, later

    rs, later = run_virtual(main)
    assert [r.status_code for r in rs] == [200, 200, 200, 429]
    remaining = [int(r.headers["x-ratelimit-remaining-requests"]) for r in rs[:3]]
    assert remaining == [2, 1, 0]
    limited = rs[-1]
    assert limited.headers["x-ratelimit-limit-requests"] == "3"
    assert limited.headers["x-ratelimit-remaining-requests"] == "0"
    reset = limited.headers["x-ratelimit-reset-requests"]
    assert GO_DURATION.match(reset) and 0 < _seconds(reset) <= 60
    assert int(limited.headers["retry-after"]) >= 1
    assert 0 < int(limited.headers["retry-after-ms"]) <= 20_000
    err = limited.json()["error"]
    assert err["type"] == "requests"
    assert err["code"] == "rate_limit_exceeded"
    assert "RPM" in err["message"]
    assert later.status_code == 200


def test_tpm_reserves_prompt_plus_max_tokens() -> None:
    async def main() -> list[httpx2.Response]:
        engine = SimEngine(_profile("gpu", tpm=5000), clock=LoopClock())
        body = {"messages": MESSAGES, "max_tokens": 3000}
        async with _client(engine) as client:
            return [await client.post("/chat/completions", json=body) for _ in range(2)]

    first, second = run_virtual(main)
    assert first.status_code == 200
    assert int(first.headers["x-ratelimit-remaining-tokens"]) <= 2000
    assert second.status_code == 429
    assert second.json()["error"]["type"] == "tokens"
    assert GO_DURATION.match(second.headers["x-ratelimit-reset-tokens"])


async def _flood(engine: SimEngine, n: int) -> list[httpx2.Response]:
    out: list[httpx2.Response] = []
    async with _client(engine) as client:

        async def one() -> None:
            out.append(await client.post("/chat/completions", json={"messages": MESSAGES}))

        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(one)
    return out


@pytest.mark.parametrize("status", [429, 503])
def test_full_queue_rejects(status: int) -> None:
    profile = _profile("gpu", slots=2, max_queue=2, queue_full_status=status)

    async def main() -> tuple[list[httpx2.Response], Any]:
        engine = SimEngine(profile, clock=LoopClock())
        return await _flood(engine, 7), engine.ledger.snapshot()

    rs, ledger = run_virtual(main)
    rejected = [r for r in rs if r.status_code != 200]
    assert len(rejected) == 3
    assert all(r.status_code == status for r in rejected)
    assert all(float(r.headers["retry-after"]) > 0 for r in rejected)
    assert ledger.ok == 4
    assert (ledger.rate_limited if status == 429 else ledger.server_errors) == 3


def test_llamacpp_queues_without_limit_and_never_rejects() -> None:
    async def main() -> tuple[list[httpx2.Response], int]:
        engine = SimEngine("llamacpp", clock=LoopClock())
        rs = await _flood(engine, 60)
        return rs, engine.snapshot().active

    rs, active = run_virtual(main)
    assert all(r.status_code == 200 for r in rs)
    assert active == 0


def test_a_queued_stream_gets_its_headers_only_when_it_starts_running() -> None:
    profile = _profile("llamacpp", slots=1, jitter_sigma=0.0)

    async def main() -> tuple[float, float]:
        engine = SimEngine(profile, clock=LoopClock())
        body = json.dumps({"messages": MESSAGES, "stream": True, "max_tokens": 50}).encode()
        first = await engine.handle("POST", "/v1/chat/completions", {}, body)
        assert first.stream is not None
        t0 = anyio.current_time()
        headers_at = 0.0

        async def second() -> None:
            nonlocal headers_at
            r = await engine.handle("POST", "/v1/chat/completions", {}, body)
            headers_at = anyio.current_time() - t0
            assert r.stream is not None
            await r.stream.aclose()

        async with anyio.create_task_group() as tg:
            tg.start_soon(second)
            await anyio.lowlevel.checkpoint()
            assert engine.snapshot().queued == 1
            async for _ in first.stream:
                pass
            first_done = anyio.current_time() - t0
        return first_done, headers_at

    first_done, headers_at = run_virtual(main)
    assert first_done > 0.5
    assert headers_at >= first_done


def test_the_ledger_keeps_the_most_requests_held_at_once() -> None:
    """``peak_in_flight``: running plus queued, never a request the full queue refused — what
    a fleet of clients really put on the server."""

    async def main() -> tuple[int, int, int]:
        engine = SimEngine(
            _profile("gpu", slots=4, max_queue=3, rpm=None, tpm=None), clock=LoopClock()
        )
        async with _client(engine) as client:
            statuses: list[int] = []

            async def one() -> None:
                body = {"model": "m", "messages": MESSAGES}
                r = await client.post("/chat/completions", json=body)
                statuses.append(r.status_code)

            async with anyio.create_task_group() as group:
                for _ in range(10):
                    group.start_soon(one)
        snap = engine.ledger.snapshot()
        return snap.peak_in_flight, statuses.count(200), len(statuses) - statuses.count(200)

    peak, ok, refused = run_virtual(main)
    assert (peak, ok, refused) == (7, 7, 3)
