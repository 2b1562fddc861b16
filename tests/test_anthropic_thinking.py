"""Extended thinking in a tool loop on ``provider="anthropic"``: the answer's ``thinking``
blocks (with their signatures) come back on ``r.raw``'s message as ``thinking_blocks``, whole
or streamed, and an assistant message that carries them goes back to Anthropic with them in
front of its ``tool_use`` — without them Anthropic answers the loop's second turn with a 400
("a final `assistant` message must start with a thinking block"). The simulator enforces that
rule and the signatures, as the real API does."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

import gptgate as gg
from gptgate.sim import ANTHROPIC_PROFILE, LoopClock, SimEngine, run_virtual
from gptgate.sim.anthropic_thinking import sign
from gptgate.testing import sim_backend
from gptgate.wire.anthropic_messages import to_messages_request

from .mockbackend import Script, error, ok
from .mockbackend import backend as mock_backend
from .mockbackend import stream as sse_answer

MODEL = "claude-sonnet-4-5"
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "look a fact up",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}}]
THINKING = {"type": "enabled", "budget_tokens": 1024}
ASK = [{"role": "user", "content": "Look up 7."}]


def _virtual(main: Any) -> Any:
    async def run() -> Any:
        clock = LoopClock()
        backend, engine = sim_backend(
            ANTHROPIC_PROFILE.model_copy(update={"output_tokens_mean": 40}), name="claude",
            clock=clock, seed=7, provider="anthropic", base_url="http://127.0.0.1:8000",
            api_key="sk-ant-test", concurrency=4, model=MODEL,
        )
        async with gg.Gateway([backend], clock=clock, seed=3) as gate:
            return await main(gate, engine)

    return run_virtual(run)


async def _first_turn(gate: gg.Gateway, *, stream: bool, **where: Any) -> dict[str, Any]:
    ask: dict[str, Any] = {"tools": TOOLS, "max_tokens": 2048, "thinking": THINKING, **where}
    if stream:
        async with gate.stream(ASK, **ask) as s:
            [_ async for _ in s]
        raw = s.result.raw
    else:
        raw = (await gate.chat(ASK, **ask)).raw
    assert raw is not None
    message: dict[str, Any] = raw["choices"][0]["message"]
    return message


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_loop_with_thinking_sends_the_thinking_back(stream: bool) -> None:
    async def main(gate: gg.Gateway, engine: SimEngine) -> tuple[Any, Any]:
        message = await _first_turn(gate, stream=stream)
        (call,) = message["tool_calls"]
        answer = await gate.chat(
            [*ASK, message, {"role": "tool", "tool_call_id": call["id"], "content": "prime"}],
            tools=TOOLS, max_tokens=2048, thinking=THINKING,
        )
        return message, answer

    message, answer = _virtual(main)
    (block,) = message["thinking_blocks"]
    assert block["type"] == "thinking" and block["signature"] == sign(block["thinking"])
    assert block["thinking"] not in (message["content"] or "")  # the text is the answer's only
    assert answer.text and answer.finish_reason == "stop"


def test_thinking_blocks_go_first_in_the_assistant_turn_as_they_came() -> None:
    thought = {"type": "thinking", "thinking": "hmm", "signature": "c2ln"}
    hidden = {"type": "redacted_thinking", "data": "ZW5j"}
    call = {"id": "toolu_1", "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"q": "7"})}}
    body = to_messages_request(
        MODEL,
        [*ASK, {"role": "assistant", "content": "Let me look.", "tool_calls": [call],
                "thinking_blocks": [thought, hidden]},
         {"role": "tool", "tool_call_id": "toolu_1", "content": "prime"}],
        {"max_tokens": 2048, "thinking": THINKING}, 4096,
    )
    assistant = body["messages"][1]
    assert assistant["role"] == "assistant"
    assert [b["type"] for b in assistant["content"]] == [
        "thinking", "redacted_thinking", "text", "tool_use"]
    assert assistant["content"][:2] == [thought, hidden]


def test_the_simulator_refuses_a_tool_loop_that_dropped_the_thinking() -> None:
    async def main(gate: gg.Gateway, engine: SimEngine) -> None:
        message = await _first_turn(gate, stream=False)
        (call,) = message["tool_calls"]
        dropped = {k: v for k, v in message.items() if k != "thinking_blocks"}
        result = [{"role": "tool", "tool_call_id": call["id"], "content": "prime"}]
        with pytest.raises(gg.BadRequestError, match="must start with a thinking block"):
            await gate.chat([*ASK, dropped, *result], tools=TOOLS, max_tokens=2048,
                            thinking=THINKING)
        forged = {**message, "thinking_blocks": [
            {**message["thinking_blocks"][0], "thinking": "I made this up."}]}
        with pytest.raises(gg.BadRequestError, match="Invalid `signature`"):
            await gate.chat([*ASK, forged, *result], tools=TOOLS, max_tokens=2048,
                            thinking=THINKING)
        # gptgate refuses it unsent (test_anthropic_thinking_rules.py): sent anyway, the
        # simulated server answers as Anthropic does
        with pytest.raises(gg.BadRequestError, match=r"greater than `thinking\.budget_tokens`"):
            await gate.chat(ASK, max_tokens=1024, extra_body={"thinking": THINKING})

    _virtual(main)


def _strict_openai(request: httpx2.Request) -> httpx2.Response:
    """An OpenAI-dialect server that, like api.openai.com, refuses a message field it does
    not know (400 "Additional properties are not allowed")."""
    known = {"role", "content", "name", "tool_calls", "tool_call_id", "refusal"}
    body = json.loads(request.content)
    for i, message in enumerate(body["messages"]):
        for key in set(message) - known:
            return error(400, f"Additional properties are not allowed ('{key}' was "
                              f"unexpected) - 'messages.{i}'")
    return sse_answer(["It is prime."]) if body.get("stream") else ok("It is prime.")


@pytest.mark.parametrize("stream", [False, True])
def test_a_thinking_conversation_sent_on_to_an_openai_backend_leaves_the_blocks_behind(
    stream: bool,
) -> None:
    """A mixed fleet: the tool loop's first turn is Claude's (its message carries
    ``thinking_blocks``), the next goes to an OpenAI-dialect backend (failover, a pin) —
    which gets the message without them, while the caller's message keeps them for Claude."""
    script = Script(_strict_openai)

    async def run() -> tuple[dict[str, Any], Any, Any]:
        clock = LoopClock()
        claude, _ = sim_backend(
            ANTHROPIC_PROFILE.model_copy(update={"output_tokens_mean": 40}), name="claude",
            clock=clock, seed=7, provider="anthropic", base_url="http://127.0.0.1:8000",
            api_key="sk-ant-test", concurrency=4, model=MODEL,
        )
        local = mock_backend(script, name="local", provider="openai", api_key="sk-test")
        async with gg.Gateway([claude, local], clock=clock, seed=3) as gate:
            message = await _first_turn(gate, stream=stream, backend="claude")
            (call,) = message["tool_calls"]
            turn = [*ASK, message, {"role": "tool", "tool_call_id": call["id"],
                                    "content": "prime"}]
            elsewhere = await gate.chat(turn, tools=TOOLS, max_tokens=2048, backend="local",
                                        stream=stream)
            back = await gate.chat(turn, tools=TOOLS, max_tokens=2048, thinking=THINKING,
                                   backend="claude", stream=stream)
            return message, elsewhere, back

    message, elsewhere, back = run_virtual(run)
    assert elsewhere.text == "It is prime."
    (sent,) = script.bodies
    assert "thinking_blocks" not in sent["messages"][1]
    assert sent["messages"][1]["tool_calls"] == message["tool_calls"]
    assert message["thinking_blocks"]  # the caller's message is untouched …
    assert back.text and back.finish_reason == "stop"  # … and Claude still gets its blocks
