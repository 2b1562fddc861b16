"""How long after a backend comes back its calls succeed again: the circuit's cool-down doubles
after each failed probe up to ``breaker_max_cooldown_s`` (60 s, as before), so after a long
outage the next probe may be up to that long away. The cap was hard-coded; an SRE whose
backend restarts in seconds (a local model server) can now shorten it — a probe is one
request per cool-down. A virtual clock and a call a second, as steady traffic."""

from __future__ import annotations

import functools

import httpx2
import pytest

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


async def recovery_s(outage_s: float, **options: float) -> float:
    """A backend down (500s) from 0 to ``outage_s``, a call every second: seconds from its
    return to the first call that succeeds."""
    clock = LoopClock()

    def handler(request: httpx2.Request) -> httpx2.Response:
        if clock.now() < outage_s:
            return httpx2.Response(500, json={"error": {"message": "down"}})
        return httpx2.Response(200, json=ANSWER)

    b = gg.Backend(name="a", base_url="http://127.0.0.1:1/v1", model="m", api_key="EMPTY",
                   transport=httpx2.MockTransport(handler))
    async with gg.Gateway([b], clock=clock, seed=1, max_attempts=1, max_breaker_wait_s=0.0,
                          **options) as gate:
        while True:
            try:
                await gate.chat(USER, max_tokens=5)
            except gg.GateError:
                await clock.sleep(1.0)
                continue
            return clock.now() - outage_s


OUTAGES = [300.0 + 7.0 * i for i in range(9)]  # a 5-minute outage, ending at different phases


def test_the_default_cap_keeps_a_long_outage_up_to_a_minute_longer() -> None:
    waits = [run_virtual(recovery_s, outage) for outage in OUTAGES]
    assert max(waits) <= 60.0 + 1.0
    assert max(waits) > 30.0  # what an SRE sees with the default: tens of seconds


def test_a_lower_cap_brings_the_backend_back_within_it() -> None:
    capped = functools.partial(recovery_s, breaker_max_cooldown_s=10.0)
    waits = [run_virtual(capped, outage) for outage in OUTAGES]
    assert max(waits) <= 10.0 + 1.0


def test_the_cap_never_shortens_the_first_cool_down() -> None:
    """A first cool-down above the cap stays the cool-down; before, a failed probe "doubled"
    a 120 s cool-down down to the 60 s cap."""
    breaker = CircuitBreaker(threshold=1, cooldown_s=120.0, max_cooldown_s=60.0)
    breaker.on_failure(0.0)
    assert breaker.opened_until == 120.0
    assert breaker.claim_probe(120.0)  # the probe …
    breaker.on_failure(120.0)  # … fails
    assert breaker.opened_until - 120.0 == 120.0


def test_the_cap_is_a_gateway_option_checked_like_the_cool_down() -> None:
    config = gg.GatewayConfig(
        backends=[gg.Backend(name="a", base_url="http://127.0.0.1:1/v1", model="m")],
        breaker_max_cooldown_s=15.0,
    )
    assert config.breaker_max_cooldown_s == 15.0
    with pytest.raises(ValueError, match="breaker_max_cooldown_s"):
        gg.GatewayConfig(
            backends=[gg.Backend(name="a", base_url="http://127.0.0.1:1/v1", model="m")],
            breaker_max_cooldown_s=0.0,
        )
