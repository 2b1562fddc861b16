"""A dollar budget reserves an Anthropic call's answer at the ``max_tokens`` gptgate sends.

The Messages API requires ``max_tokens``: a call that gives none is sent 4,096 (the
backend's ``max_output_tokens`` when set), or its thinking budget + 4,096 (docs/providers.md).
The budget reserved 1,024 tokens of answer for it — the guess for a server whose own default
is unknown — so such a call was admitted under a budget its answer could overrun 20 times:
with thinking, a $0.02 reservation for a $0.30 answer on Sonnet (docs/budget.md promises
"plus ``max_tokens`` of answer")."""

from __future__ import annotations

from typing import Any

import pytest

import gptgate as gg

from .claudemock import claude

USER = [{"role": "user", "content": "Prove that there are infinitely many primes."}]


def _claude(sent: list[dict[str, Any]], output_tokens: int, **options: Any) -> gg.Backend:
    return claude(sent, usage={"input_tokens": 20, "output_tokens": output_tokens},
                  stop_reason="max_tokens", **options)


@pytest.mark.parametrize(
    ("params", "options", "sent_max", "usd"),
    [
        ({"thinking": {"type": "enabled", "budget_tokens": 16000}}, {}, 20096, 0.25),
        ({}, {}, 4096, 0.05),
        ({}, {"max_output_tokens": 8000}, 8000, 0.10),
    ],
    ids=["thinking", "plain", "backend-cap"],
)
async def test_a_call_without_max_tokens_reserves_what_is_sent(
    params: dict[str, Any], options: dict[str, Any], sent_max: int, usd: float
) -> None:
    """A budget below the call's dearest outcome refuses it unsent ("raise")."""
    sent: list[dict[str, Any]] = []
    budget = gg.Budget(usd_per_hour=usd, on_exceed="raise")
    async with gg.Gateway([_claude(sent, sent_max, **options)], budget=budget) as gate:
        with pytest.raises(gg.BudgetExceededError, match="may cost"):
            await gate.chat(USER, **params)
        spent = gate.stats()["claude"].cost_usd
    assert sent == [] and spent == 0.0
    assert sent_max * 15.0 / 1e6 > usd  # the answer it may send would overrun the budget


async def test_under_a_budget_that_holds_it_the_call_is_sent_with_that_max_tokens() -> None:
    sent: list[dict[str, Any]] = []
    budget = gg.Budget(usd_per_hour=1.0, on_exceed="raise")
    thinking = {"type": "enabled", "budget_tokens": 16000}
    async with gg.Gateway([_claude(sent, 20096)], budget=budget) as gate:
        result = await gate.chat(USER, thinking=thinking)
    assert sent[0]["max_tokens"] == 20096
    assert result.cost_usd == pytest.approx((20 * 3.0 + 20096 * 15.0) / 1e6)


async def test_a_given_max_tokens_is_reserved_as_before() -> None:
    sent: list[dict[str, Any]] = []
    budget = gg.Budget(usd_per_hour=0.05, on_exceed="raise")
    async with gg.Gateway([_claude(sent, 500)], budget=budget) as gate:
        await gate.chat(USER, max_tokens=500)
    assert sent[0]["max_tokens"] == 500
