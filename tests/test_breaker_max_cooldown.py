"""How long after a backend comes back its calls succeed again: the circuit's cool-down doubles
after each failed probe up to ``breaker_max_cooldown_s`` (60 s, as before), so after a long
outage the next probe may be up to that long away. The cap was hard-coded; an SRE whose
backend restarts in seconds (a local model server) can now shorten it — a probe is one
request per cool-down. A virtual clock and a call a second, as steady traffic."""

from __future__ import annotations

import pytest

import gptgate as gg
from benchmarks.breaker_recovery import one_outage
from gptgate.routing import CircuitBreaker
from gptgate.testing import run_virtual


def recovery_s(outage_s: float, cap_s: float = 60.0) -> float:
    """A backend down (500s) from 0 to ``outage_s``, a call every second: seconds from its
    return to the first call that succeeds (benchmarks/breaker_recovery.py's run)."""
    return run_virtual(one_outage, outage_s, cap_s)[0]


OUTAGES = [300.0 + 7.0 * i for i in range(9)]  # a 5-minute outage, ending at different phases


def test_the_default_cap_keeps_a_long_outage_up_to_a_minute_longer() -> None:
    waits = [recovery_s(outage) for outage in OUTAGES]
    assert max(waits) <= 60.0 + 1.0
    assert max(waits) > 30.0  # what an SRE sees with the default: tens of seconds


def test_a_lower_cap_brings_the_backend_back_within_it() -> None:
    waits = [recovery_s(outage, cap_s=10.0) for outage in OUTAGES]
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
