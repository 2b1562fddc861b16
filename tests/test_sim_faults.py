"""Scripted (x-sim-fault) and random (FaultPlan) failures reach the client as they would
from a real server, and the ledger bills them as the server would."""

from __future__ import annotations

import contextlib
import itertools
import json
from typing import Any

import anyio
import httpx2
import pytest
from pydantic import ValidationError

from gptgate.sim import FaultPlan, LoopClock, SimEngine, SimTransport, run_virtual

MESSAGES = [{"role": "user", "content": "tell me a story"}]
STREAM = {"messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}


def _client(engine: SimEngine) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=SimTransport(engine), base_url="http://sim/v1")


def _post(client: httpx2.AsyncClient, fault: str, body: dict[str, Any] | None = None) -> Any:
    return client.post(
        "/chat/completions", json=body or {"messages": MESSAGES}, headers={"x-sim-fault": fault}
    )


@pytest.mark.parametrize("fault", ["500", "503", "429"])
def test_status_faults(fault: str) -> None:
    async def main() -> tuple[httpx2.Response, Any]:
        engine = SimEngine("hosted", clock=LoopClock())
        async with _client(engine) as client:
            r = await _post(client, fault)
        return r, engine.ledger.snapshot()

    r, ledger = run_virtual(main)
    assert r.status_code == int(fault)
    assert "message" in r.json()["error"]
    assert r.headers["x-request-id"]
    if fault == "429":
        assert int(r.headers["retry-after-ms"]) > 0
        assert ledger.rate_limited == 1
    else:
        assert ledger.server_errors == 1
    assert ledger.billed_tokens == 0


def test_reset_mid_stream_raises_read_error_and_bills_what_was_generated() -> None:
    async def main() -> tuple[list[str], Any, int]:
        engine = SimEngine("gpu", clock=LoopClock())
        received: list[str] = []
        async with _client(engine) as client:
            with pytest.raises(httpx2.ReadError):
                async with client.stream(
                    "POST", "/chat/completions", json=STREAM, headers={"x-sim-fault": "reset"}
                ) as r:
                    assert r.status_code == 200
                    async for chunk in r.aiter_text():
                        received.append(chunk)
        return received, engine.ledger.snapshot(), engine.snapshot().active

    received, ledger, active = run_virtual(main)
    assert received and "[DONE]" not in "".join(received)
    assert ledger.interrupted == 1
    assert ledger.input_tokens > 0
    assert 0 < ledger.output_tokens == ledger.wasted_output_tokens
    assert active == 0


def test_reset_mid_body_of_a_json_response() -> None:
    async def main() -> Any:
        engine = SimEngine("gpu", clock=LoopClock())
        async with _client(engine) as client:
            with pytest.raises(httpx2.ReadError):
                await _post(client, "reset")
        return engine.ledger.snapshot()

    ledger = run_virtual(main)
    assert ledger.interrupted == 1 and ledger.output_tokens > 0


def test_garbage_body_and_garbage_sse_event() -> None:
    async def main() -> tuple[httpx2.Response, str, Any]:
        engine = SimEngine("gpu", clock=LoopClock())
        async with _client(engine) as client:
            plain = await _post(client, "garbage")
            async with client.stream(
                "POST", "/chat/completions", json=STREAM, headers={"x-sim-fault": "garbage"}
            ) as r:
                raw = (await r.aread()).decode()
        return plain, raw, engine.ledger.snapshot()

    plain, raw, ledger = run_virtual(main)
    assert plain.status_code == 200
    with pytest.raises(ValueError):
        plain.json()
    events = [e for e in raw.split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    bad = 0
    for e in events[:-1]:
        try:
            json.loads(e[len("data: ") :])
        except ValueError:
            bad += 1
    assert bad == 1
    assert ledger.malformed == 2


def test_stall_pauses_a_stream_after_its_first_chunk() -> None:
    async def main() -> list[float]:
        engine = SimEngine("gpu", clock=LoopClock())
        times: list[float] = []
        async with (
            _client(engine) as client,
            client.stream(
                "POST", "/chat/completions", json=STREAM, headers={"x-sim-fault": "stall=7.5"}
            ) as r,
        ):
            async for _ in r.aiter_raw():
                times.append(anyio.current_time())
        return times

    times = run_virtual(main)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps[0] >= 7.5
    assert max(gaps[1:]) < 1.0


def test_unknown_fault_is_a_400() -> None:
    async def main() -> httpx2.Response:
        engine = SimEngine("gpu", clock=LoopClock())
        async with _client(engine) as client:
            r: httpx2.Response = await _post(client, "explode")
            return r

    r = run_virtual(main)
    assert r.status_code == 400
    assert "x-sim-fault" in r.json()["error"]["message"]


def test_random_faults_follow_the_plan() -> None:
    plan = FaultPlan(seed=5, error_rate=0.2, reset_rate=0.1)

    async def main() -> Any:
        engine = SimEngine("gpu", clock=LoopClock(), faults=plan)
        async with _client(engine) as client:

            async def one() -> None:
                with contextlib.suppress(httpx2.ReadError):
                    await client.post("/chat/completions", json={"messages": MESSAGES})

            async with anyio.create_task_group() as tg:
                for _ in range(300):
                    tg.start_soon(one)
        return engine.ledger.snapshot()

    ledger = run_virtual(main)
    assert ledger.requests == 300
    assert 35 <= ledger.server_errors <= 85
    assert 12 <= ledger.interrupted <= 50
    assert ledger.ok == 300 - ledger.server_errors - ledger.interrupted


def test_fault_plan_validation() -> None:
    with pytest.raises(ValueError):
        FaultPlan(error_rate=1.5)
    with pytest.raises(ValueError):
        FaultPlan(error_rate=0.6, reset_rate=0.6)


# -- the chaos suite's faults: drop, loris, endless, storms ---------------------------------


def test_drop_closes_the_connection_before_any_response_and_bills_nothing() -> None:
    async def main() -> Any:
        engine = SimEngine("gpu", clock=LoopClock())
        async with _client(engine) as client:
            with pytest.raises(httpx2.RemoteProtocolError):
                await _post(client, "drop")
        return engine.ledger.snapshot()

    ledger = run_virtual(main)
    assert ledger.server_errors == 1 and ledger.billed_tokens == 0


def test_a_loris_never_sends_its_first_byte() -> None:
    async def main() -> tuple[float, Any]:
        clock = LoopClock()
        engine = SimEngine("gpu", clock=clock)
        async with _client(engine) as client:
            with anyio.move_on_after(120.0):
                await _post(client, "loris")
                raise AssertionError("a loris answered")
        return clock.now(), engine.ledger.snapshot()

    waited, ledger = run_virtual(main)
    assert waited >= 120.0 and ledger.billed_tokens == 0


@pytest.mark.parametrize("stream", [True, False])
def test_an_endless_response_never_ends_and_is_billed_as_generated(stream: bool) -> None:
    async def main() -> tuple[bytes, Any]:
        clock = LoopClock()
        engine = SimEngine("gpu", clock=clock)
        body = STREAM if stream else {"messages": MESSAGES, "max_tokens": 50}
        received = b""
        async with _client(engine) as client:
            with anyio.move_on_after(60.0):
                async with client.stream(
                    "POST", "/chat/completions", json=body, headers={"x-sim-fault": "endless"}
                ) as r:
                    async for chunk in r.aiter_bytes():
                        received += chunk
                raise AssertionError("an endless response ended")
        return received, engine.ledger.snapshot()

    received, ledger = run_virtual(main)
    assert b"[DONE]" not in received and len(received) > 100
    assert ledger.output_tokens > 0  # the answer was generated, though never delivered whole


def test_storms_refuse_everything_for_their_length_with_retry_after() -> None:
    plan = FaultPlan(storm_every_s=60.0, storm_s=5.0)
    assert plan.storm_left(30.0) == 0.0
    assert plan.storm_left(61.0) == pytest.approx(4.0)
    assert plan.storm_left(66.0) == 0.0
    assert plan.storm_left(122.5) == pytest.approx(2.5)

    async def main() -> list[tuple[float, int, str | None]]:
        clock = LoopClock()
        engine = SimEngine("gpu", clock=clock, faults=plan)
        seen = []
        async with _client(engine) as client:
            for at in (10.0, 62.0, 64.9, 70.0):
                await clock.sleep(at - clock.now())
                r = await client.post("/chat/completions", json={"messages": MESSAGES})
                seen.append((at, r.status_code, r.headers.get("retry-after")))
        return seen

    seen = run_virtual(main)
    assert [status for _, status, _ in seen] == [200, 429, 429, 200]
    assert seen[1][2] == "3"  # ceil(5 - 2)


def test_a_plan_with_rates_over_one_is_refused() -> None:
    with pytest.raises(ValueError, match="add up"):
        FaultPlan(error_rate=0.5, drop_rate=0.3, endless_rate=0.3)
    with pytest.raises(ValueError, match="storm"):
        FaultPlan(storm_every_s=5.0, storm_s=5.0)


@pytest.mark.parametrize(
    "half", [{"storm_every_s": 10.0}, {"storm_s": 5.0}, {"storm_every_s": 10, "storm_s": 0}]
)
def test_half_a_storm_is_a_validation_error_naming_the_field(half: dict[str, float]) -> None:
    """A period without a length (or a length without a period) never storms: refused."""
    with pytest.raises(ValidationError) as refused:
        FaultPlan(**half)
    error = refused.value.errors()[0]
    assert error["loc"] == ("storm_s",) and "storm_every_s" in error["msg"]


def test_a_fault_rate_given_as_a_string_is_refused() -> None:
    with pytest.raises(ValidationError) as refused:
        FaultPlan(error_rate="0.5")  # type: ignore[arg-type]
    assert refused.value.errors()[0]["loc"] == ("error_rate",)
