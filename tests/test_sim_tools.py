"""The simulator's tool calls on its OpenAI-shaped flavors (gptgate/sim/tools.py): a request
with ``tools`` is answered with one deterministic call — in a body's ``message.tool_calls``
or a stream's ``delta.tool_calls`` pieces — and in text once the tool's result is given."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from gptgate.sim import (
    DEEPSEEK_PROFILE,
    LoopClock,
    SimEngine,
    SimTransport,
    get_profile,
    run_virtual,
)

TOOLS = [
    {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["q", "n"]}}},
]
USER = [{"role": "user", "content": "Look it up."}]
FLAVORS = {"openai": get_profile("gpu"), "llamacpp": get_profile("llamacpp"),
           "deepseek": DEEPSEEK_PROFILE}


def _post(flavor: str, body: dict[str, Any]) -> httpx2.Response:
    async def main() -> httpx2.Response:
        engine = SimEngine(FLAVORS[flavor], clock=LoopClock(), seed=1)
        async with httpx2.AsyncClient(transport=SimTransport(engine), base_url="http://s") as c:
            return await c.post("/v1/chat/completions", json={"model": "m", **body},
                                headers={"authorization": "Bearer k"})

    return run_virtual(main)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_named_tool_is_called_with_its_required_arguments(flavor: str) -> None:
    choice = {"type": "function", "function": {"name": "lookup"}}
    r = _post(flavor, {"messages": USER, "tools": TOOLS, "tool_choice": choice})
    (c,) = r.json()["choices"]
    assert c["finish_reason"] == "tool_calls" and c["message"]["content"] is None
    (call,) = c["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "lookup"
    assert json.loads(call["function"]["arguments"]) == {"q": "sim", "n": 1}


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_stream_sends_the_call_in_pieces_and_finishes_with_tool_calls(flavor: str) -> None:
    r = _post(flavor, {"messages": USER, "tools": TOOLS, "stream": True,
                       "stream_options": {"include_usage": True}})
    events = [json.loads(line[6:]) for line in r.text.splitlines()
              if line.startswith("data: {")]
    pieces = [d["tool_calls"][0] for e in events for c in e["choices"]
              if "tool_calls" in (d := c["delta"])]
    assert pieces[0]["id"].startswith("call_") and pieces[0]["function"]["name"] == "noop"
    assert "".join(p["function"]["arguments"] for p in pieces) == "{}"
    finishes = [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
    assert finishes == ["tool_calls"]
    assert any(e.get("usage") for e in events)  # the usage still comes, in the flavor's place


@pytest.mark.parametrize(
    "body",
    [
        {"messages": USER, "tools": TOOLS, "tool_choice": "none"},
        {"messages": [*USER, {"role": "assistant", "content": None, "tool_calls": []},
                      {"role": "tool", "tool_call_id": "call_1", "content": "42"}],
         "tools": TOOLS},
    ],
    ids=["tool_choice_none", "after_the_tools_result"],
)
def test_the_model_answers_in_text_when_no_call_is_wanted(body: dict[str, Any]) -> None:
    (c,) = _post("openai", body).json()["choices"]
    assert c["finish_reason"] in ("stop", "length") and c["message"]["content"]
    assert "tool_calls" not in c["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": [{"type": "function"}]}, "tools[0].function.name"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "x"}}},
         "tool_choice"),
    ],
)
def test_malformed_tools_are_a_400_naming_the_field(body: dict[str, Any], param: str) -> None:
    r = _post("openai", {"messages": USER, **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == param
