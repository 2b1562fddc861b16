"""What extended thinking asks of a call's other parameters, on ``provider="anthropic"``.

``max_tokens`` counts the thinking: it must be above ``thinking.budget_tokens``. gptgate sends
``max_tokens=4096`` when the call gives none, so a call with a budget of 4,096 or more and no
``max_tokens`` — the usual OpenAI-style call, where ``max_tokens`` is optional — was a 400
("`max_tokens` must be greater than `thinking.budget_tokens`") after its wait in the queue.
The default now leaves the answer its 4,096 tokens after the budget.

Thinking also refuses a ``temperature`` other than 1, ``top_k``, a ``top_p`` under 0.95 and a
``tool_choice`` that forces a tool (Anthropic's extended-thinking docs): such a call was a 400
from the server; it is refused before sending now, naming the parameter, like any parameter a
provider refuses — so a mixed fleet sends it where it is taken."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest

import gptgate as gg
from gptgate.sim import ANTHROPIC_PROFILE, LoopClock, SimEngine, SimTransport, run_virtual

ROOT = "http://127.0.0.1:1"
MODEL = "claude-sonnet-4-5"
ASK = [{"role": "user", "content": "Is 7 prime?"}]


async def _call(params: dict[str, Any], **backend: Any) -> tuple[Any, Any, list[dict[str, Any]]]:
    clock = LoopClock()
    engine = SimEngine(ANTHROPIC_PROFILE.model_copy(update={"output_tokens_mean": 40}),
                       clock=clock, seed=3)
    sent: list[dict[str, Any]] = []
    transport = SimTransport(engine)
    inner = transport.handle_async_request

    async def record(request: Any) -> Any:
        sent.append(json.loads(request.content))
        return await inner(request)

    transport.handle_async_request = record  # type: ignore[method-assign]
    claude = gg.Backend(name="claude", provider="anthropic", base_url=ROOT, model=MODEL,
                        api_key="sk-ant-test", transport=transport, **backend)
    async with gg.Gateway([claude], clock=clock, seed=1) as gate:
        try:
            result: Any = await gate.chat(ASK, **params)
        except gg.GateError as error:
            result = error
    return result, engine.ledger.snapshot(), sent


@pytest.mark.parametrize("budget", [1024, 4096, 10_000])
def test_a_thinking_budget_without_max_tokens_leaves_room_for_the_answer(budget: int) -> None:
    result, _, sent = run_virtual(_call, {"thinking": {"type": "enabled",
                                                        "budget_tokens": budget}})
    assert isinstance(result, gg.ChatResult), result
    assert sent[0]["max_tokens"] == budget + 4096


def test_a_backends_output_cap_is_still_the_default() -> None:
    result, _, sent = run_virtual(functools.partial(
        _call, {"thinking": {"type": "enabled", "budget_tokens": 10_000}},
        max_output_tokens=64_000,
    ))
    assert isinstance(result, gg.ChatResult)
    assert sent[0]["max_tokens"] == 64_000


@pytest.mark.parametrize(
    ("param", "value"),
    [("temperature", 0.2), ("top_k", 40), ("top_p", 0.5),
     ("tool_choice", "required"),
     ("tool_choice", {"type": "function", "function": {"name": "lookup"}})],
)
def test_a_parameter_thinking_refuses_is_refused_before_sending(param: str, value: Any) -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {}}}}]
    params = {"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048,
              "tools": tools, param: value}
    result, server, sent = run_virtual(_call, params)
    assert isinstance(result, gg.BadRequestError), result
    assert param in str(result) and "nothing was sent" in str(result)
    assert sent == [] and server.requests == 0


@pytest.mark.parametrize(
    ("param", "value"),
    [("temperature", 1), ("top_p", 0.95), ("tool_choice", "auto"), ("tool_choice", "none")],
)
def test_what_thinking_takes_is_sent(param: str, value: Any) -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {}}}}]
    params = {"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048,
              "tools": tools, param: value}
    result, _, sent = run_virtual(_call, params)
    assert isinstance(result, gg.ChatResult), result
    assert len(sent) == 1


def test_the_simulator_refuses_what_thinking_refuses() -> None:
    """Sent anyway (``extra_body=``), the simulated server answers as Anthropic does."""
    result, server, _ = run_virtual(_call, {
        "thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048,
        "extra_body": {"temperature": 0.2},
    })
    assert isinstance(result, gg.BadRequestError) and "temperature" in str(result)
    assert server.requests == 1
