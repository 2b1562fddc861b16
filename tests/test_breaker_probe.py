"""A half-open probe that ends without a verdict lets the next call probe.

After its cool-down an open circuit lets one probe through. A probe cancelled — the caller's
timeout, a hedge's loser, a client gone — or answered with a refusal gave the breaker no
success and no failure, so it stayed "probing", that is open, for good: a backend that had
recovered got no call again while another was up (40 of 40 calls went to the other backend,
2x slower, 300 s after the probe was cancelled).
"""

from __future__ import annotations

import contextlib

import anyio
import httpx2

import gptgate as gg
from gptgate.routing import CircuitBreaker
from gptgate.testing import LoopClock, run_virtual

USER = [{"role": "user", "content": "x"}]
ANSWER = {
    "id": "r", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


async def _after_a_cancelled_probe() -> tuple[str, str, dict[str, int]]:
    clock = LoopClock()
    mode = {"now": "fail"}

    async def recovering(request: httpx2.Request) -> httpx2.Response:
        if mode["now"] == "fail":
            return httpx2.Response(500, json={"error": {"message": "down"}})
        await clock.sleep(100.0 if mode["now"] == "hang" else 0.5)
        return httpx2.Response(200, json=ANSWER)

    async def slower(request: httpx2.Request) -> httpx2.Response:
        await clock.sleep(1.0)
        return httpx2.Response(200, json=ANSWER)

    a = gg.Backend(name="a", base_url="http://127.0.0.1:1/v1", model="m", concurrency=4,
                   transport=httpx2.MockTransport(recovering))
    b = gg.Backend(name="b", base_url="http://127.0.0.1:2/v1", model="m", concurrency=4,
                   transport=httpx2.MockTransport(slower))
    async with gg.Gateway([a, b], clock=clock, seed=1) as gate:
        for _ in range(8):  # "a" fails until its circuit opens
            with contextlib.suppress(gg.GateError):
                await gate.chat(USER, max_tokens=5, backend="a")
        assert gate.stats()["a"].circuit == "open"
        await clock.sleep(30.0)  # the cool-down is over
        mode["now"] = "hang"
        with anyio.move_on_after(clock.to_real(2.0)):  # the probe: the caller gives up
            await gate.chat(USER, max_tokens=5, backend="a")
        after_probe = gate.stats()["a"].circuit
        mode["now"] = "ok"  # "a" has recovered
        await clock.sleep(300.0)
        before = {name: s.calls for name, s in gate.stats().items()}
        async with anyio.create_task_group() as tg:
            for _ in range(40):
                tg.start_soon(lambda: gate.chat(USER, max_tokens=5))
                await clock.sleep(0.2)
        calls = {name: s.calls - before[name] for name, s in gate.stats().items()}
        return after_probe, gate.stats()["a"].circuit, calls


def test_a_cancelled_probe_leaves_the_circuit_half_open_and_the_backend_in_use() -> None:
    after_probe, at_end, calls = run_virtual(_after_a_cancelled_probe)
    assert after_probe == "half_open"  # the next call probes
    assert at_end == "closed"
    assert calls["a"] > calls["b"]  # the recovered, faster backend is used again


def test_only_the_current_probe_can_reopen_the_half_open_door() -> None:
    breaker = CircuitBreaker(threshold=1, cooldown_s=5.0)
    breaker.on_failure(0.0)
    assert breaker.state(1.0) == "open"
    first = breaker.on_attempt(6.0)  # half-open: this is the probe
    assert first and breaker.state(6.0) == "open"
    assert breaker.on_attempt(6.0) == 0  # no second probe while it runs
    breaker.on_failure(7.0)  # the probe failed: open again, for a longer cool-down
    breaker.probe_left(first)  # its release afterwards changes nothing
    assert breaker.state(8.0) == "open"
    second = breaker.on_attempt(30.0)
    assert second and second != first
    breaker.probe_left(first)  # a stale probe's release does not end the new one's turn
    assert breaker.state(30.0) == "open"
    breaker.probe_left(second)
    assert breaker.state(30.0) == "half_open"
