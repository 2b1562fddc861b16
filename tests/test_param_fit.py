"""A fleet of mixed providers: a call whose parameters one provider refuses goes to a backend
that takes them. An Anthropic backend beside an OpenAI-compatible one (failover, or tiers)
used to fail every call with ``response_format`` that the router sent to Anthropic — a
``BadRequestError`` advising ``extra_body=``, which Anthropic refuses too — while the other
backend was up and would have answered. Only when every eligible backend refuses is the call
refused (nothing sent), as before."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import gptgate as gg
from gptgate.sim import ANTHROPIC_PROFILE, LoopClock, get_profile, run_virtual
from gptgate.testing import sim_backend

JSON = {"response_format": {"type": "json_object"}}


def _fleet(
    main: Any, *, claude_tier: str = "large", oai_tier: str = "large", **gateway: Any
) -> Any:
    async def run() -> Any:
        clock = LoopClock()
        claude, _ = sim_backend(
            ANTHROPIC_PROFILE.model_copy(update={"output_tokens_mean": 20}), name="claude",
            clock=clock, seed=7, provider="anthropic", base_url="http://127.0.0.1:8000",
            api_key="sk-ant-test", concurrency=4, model="claude-sonnet-4-5", tier=claude_tier,
        )
        # a slower CPU server: the router prefers the Anthropic backend
        oai, _ = sim_backend(get_profile("cpu").model_copy(update={"output_tokens_mean": 20}),
                             name="oai", clock=clock, seed=8, concurrency=4, tier=oai_tier)
        async with gg.Gateway([claude, oai], clock=clock, seed=5, **gateway) as gate:
            return await main(gate)

    return run_virtual(run)


async def _ask(gate: gg.Gateway, n: int, **params: Any) -> Counter[str]:
    served: Counter[str] = Counter()
    for i in range(n):
        result = await gate.chat([{"role": "user", "content": f"Q{i}: a JSON object"}],
                                 max_tokens=20, **params)
        served[result.backend] += 1
    return served


def test_a_parameter_one_provider_refuses_goes_to_the_backend_that_takes_it() -> None:
    async def main(gate: gg.Gateway) -> tuple[Counter[str], Counter[str]]:
        return await _ask(gate, 3), await _ask(gate, 10, **JSON)

    plain, json_calls = _fleet(main)
    assert plain["claude"] > 0  # without the parameter, the router's choice is Anthropic
    assert json_calls == Counter({"oai": 10})


def test_a_call_pinned_to_the_refusing_backend_is_still_refused_before_sending() -> None:
    async def main(gate: gg.Gateway) -> None:
        with pytest.raises(gg.BadRequestError, match="'anthropic' rejects the parameter"):
            await gate.chat([{"role": "user", "content": "hi"}], backend="claude",
                            max_tokens=20, **JSON)
        stats = gate.stats()["claude"]
        assert (stats.input_tokens, stats.failures) == (0, 0)

    _fleet(main)


def test_a_preferred_tier_that_refuses_the_parameters_yields_to_the_other() -> None:
    async def main(gate: gg.Gateway) -> tuple[Counter[str], Counter[str]]:
        return await _ask(gate, 3, tier="auto"), await _ask(gate, 5, tier="auto", **JSON)

    plain, json_calls = _fleet(main, claude_tier="small", oai_tier="large",
                               tier_classifier=lambda messages, params: "small")
    assert plain == Counter({"claude": 3})
    assert json_calls == Counter({"oai": 5})
