"""The response cache and ``tier="auto"``'s ``accept``: a stored small-tier answer is still
judged by the caller's ``accept``.

``accept`` is not part of the cache key (a function has no stable identity), so a small answer
stored by one call was served as it was to a later identical call whose ``accept`` rejects it:
the caller's own check was skipped and the call was never escalated.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual
from tests.mockbackend import Script, error, ok
from tests.mockbackend import backend as mock_backend

ASK = [{"role": "user", "content": "Name a colour"}]


def _gate(small: Script, large: Script, **options: Any) -> gg.Gateway:
    return gg.Gateway(
        [mock_backend(small, name="small", tier="small"),
         mock_backend(large, name="large", tier="large")],
        clock=LoopClock(), seed=1, response_cache=gg.ResponseCache(), **options,
    )


def _not_small(result: gg.ChatResult) -> bool:
    return result.tier != "small"


async def _stored_then_judged(gateway_accept: bool) -> dict[str, Any]:
    small, large = Script(ok("teal")), Script(ok("red"))
    gate = _gate(small, large, tier_accept=_not_small if gateway_accept else None)
    async with gate:
        first = await gate.chat(ASK, max_tokens=50, temperature=0, accept=lambda r: True)
        judged = await gate.chat(
            ASK, max_tokens=50, temperature=0, accept=None if gateway_accept else _not_small
        )
        again = await gate.chat(ASK, max_tokens=50, temperature=0)
    return {"first": first, "judged": judged, "again": again,
            "small": len(small.requests), "large": len(large.requests)}


@pytest.mark.parametrize("gateway_accept", [False, True])
def test_a_cached_small_answer_the_callers_accept_rejects_is_escalated(
    gateway_accept: bool,
) -> None:
    out = run_virtual(_stored_then_judged, gateway_accept)
    assert out["first"].tier == "small" and out["first"].text == "teal"
    judged = out["judged"]
    # before: from_cache=True, tier="small", text "teal" — the rejecting accept never ran
    assert not judged.from_cache
    assert judged.tier == "large" and judged.escalated and judged.text == "red"
    assert out["large"] == 1
    # the large answer replaced the stored one: the next identical call is served it
    assert out["again"].from_cache and out["again"].text == "red"


async def _accept_with_explicit_tier() -> None:
    gate = _gate(Script(ok("teal")), Script(ok("red")))
    async with gate:
        await gate.chat(ASK, max_tokens=50, temperature=0, tier="small")
        await gate.chat(ASK, max_tokens=50, temperature=0, tier="small", accept=_not_small)


def test_accept_with_an_explicit_tier_is_refused_from_the_cache_too() -> None:
    """Before, only a call that missed the cache checked it: a hit returned the answer."""
    with pytest.raises(gg.BadRequestError, match="accept applies to tier='auto'"):
        run_virtual(_accept_with_explicit_tier)


async def _kept_while_the_large_tier_failed() -> dict[str, Any]:
    small = Script(ok(""))  # an empty answer: escalated
    large = Script(error(503), error(503), error(503), ok("red"))  # down, then back
    gate = _gate(small, large, backoff_base_s=0.001, backoff_cap_s=0.01)
    async with gate:
        kept = await gate.chat(ASK, max_tokens=50, temperature=0)
        await anyio.sleep(60)
        later = await gate.chat(ASK, max_tokens=50, temperature=0)
    return {"kept": kept, "later": later, "stats": gate.tier_stats(),
            "large": len(large.requests)}


def test_a_small_answer_kept_only_because_the_large_tier_failed_is_not_stored() -> None:
    """The empty small answer is returned while the large tier is down (as documented),
    but not stored: a minute later, the large tier back, the same request is escalated.
    Before, it was served from the cache (``from_cache=True``, empty) for the whole TTL."""
    out = run_virtual(_kept_while_the_large_tier_failed)
    kept, later = out["kept"], out["later"]
    assert kept.tier == "small" and kept.text == "" and not kept.escalated
    assert out["stats"].rules["short_ask"].escalation_failed == 1
    assert not later.from_cache
    assert later.tier == "large" and later.escalated and later.text == "red"
