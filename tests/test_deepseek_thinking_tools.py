"""A tool loop on DeepSeek's thinking mode, streamed or not.

DeepSeek's thinking mode answers with ``reasoning_content`` beside the content or the tool
call, and for a turn that made a tool call it wants that reasoning back in every later
request — without it the loop's next turn is a 400 ("The `reasoning_content` in the thinking
mode must be passed back to the API"). A non-streamed answer's ``r.raw`` message is the
server's own, reasoning included, so appending it works; a streamed answer's ``r.raw`` was
rebuilt from the deltas without the reasoning, and the loop's second turn was that 400. The
simulator's ``deepseek-reasoner`` enforces the rule, as the real API does."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

import gptgate as gg
from gptgate.sim import DEEPSEEK_PROFILE, LoopClock, SimEngine, SimTransport, run_virtual

ROOT = "http://127.0.0.1:1"
MODEL = "deepseek-reasoner"
PROFILE = DEEPSEEK_PROFILE.model_copy(update={"model": MODEL, "output_tokens_mean": 60})
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "look a fact up",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}}]
ASK = [{"role": "user", "content": "Look up 7."}]


async def _loop(stream: bool) -> tuple[dict[str, Any], gg.ChatResult]:
    clock = LoopClock()
    engine = SimEngine(PROFILE, clock=clock, seed=3)
    backend = gg.Backend(name="ds", provider="deepseek", base_url=ROOT, model=MODEL,
                         api_key="sk-test", transport=SimTransport(engine))
    async with gg.Gateway([backend], clock=clock, seed=1) as gate:
        first = await gate.chat(ASK, tools=TOOLS, max_tokens=400, stream=stream)
        assert first.raw is not None and first.finish_reason == "tool_calls"
        message: dict[str, Any] = first.raw["choices"][0]["message"]
        (call,) = message["tool_calls"]
        turn = [*ASK, message, {"role": "tool", "tool_call_id": call["id"], "content": "prime"}]
        second = await gate.chat(turn, tools=TOOLS, max_tokens=400, stream=stream)
    return message, second


@pytest.mark.parametrize("stream", [False, True])
def test_a_thinking_tool_loop_sends_the_reasoning_back(stream: bool) -> None:
    message, second = run_virtual(_loop, stream)
    assert message["reasoning_content"]  # the answer's own, streamed or not
    assert second.text and second.finish_reason == "stop"


def test_the_simulator_refuses_a_tool_loop_that_dropped_the_reasoning() -> None:
    async def main() -> tuple[dict[str, Any], httpx2.Response]:
        engine = SimEngine(PROFILE, clock=LoopClock(), seed=3)
        async with httpx2.AsyncClient(transport=SimTransport(engine), base_url=ROOT) as client:
            auth = {"authorization": "Bearer sk-test"}
            body = {"model": MODEL, "messages": ASK, "tools": TOOLS, "max_tokens": 400}
            first = (await client.post("/chat/completions", json=body, headers=auth)).json()
            message = first["choices"][0]["message"]
            call = message["tool_calls"][0]
            dropped = {k: v for k, v in message.items() if k != "reasoning_content"}
            body["messages"] = [*ASK, dropped, {"role": "tool", "tool_call_id": call["id"],
                                                "content": "prime"}]
            return message, await client.post("/chat/completions", json=body, headers=auth)

    message, refused = run_virtual(main)
    assert message["reasoning_content"] and message["content"] is None
    assert refused.status_code == 400
    assert "reasoning_content" in json.dumps(refused.json())


def _strict_openai(request: httpx2.Request) -> httpx2.Response:
    """An OpenAI-dialect server that, like api.openai.com and Azure, refuses a message field
    it does not know."""
    from .mockbackend import error, ok

    known = {"role", "content", "name", "tool_calls", "tool_call_id", "refusal"}
    body = json.loads(request.content)
    for i, message in enumerate(body["messages"]):
        for key in set(message) - known:
            return error(400, f"Additional properties are not allowed ('{key}' was "
                              f"unexpected) - 'messages.{i}'")
    return ok("It is prime.")


@pytest.mark.parametrize("stream", [False, True])
def test_the_reasoning_stays_behind_when_the_loop_goes_on_to_a_strict_backend(
    stream: bool,
) -> None:
    """A mixed fleet: DeepSeek's tool-calling turn (with its reasoning) goes on to an Azure
    deployment — which gets the message without ``reasoning_content``, as it gets one without
    Anthropic's ``thinking_blocks``; the caller's message keeps it for DeepSeek."""
    from .mockbackend import Script
    from .mockbackend import backend as mock_backend

    script = Script(_strict_openai)

    async def run() -> tuple[dict[str, Any], gg.ChatResult, gg.ChatResult]:
        clock = LoopClock()
        engine = SimEngine(PROFILE, clock=clock, seed=3)
        ds = gg.Backend(name="ds", provider="deepseek", base_url=ROOT, model=MODEL,
                        api_key="sk-test", transport=SimTransport(engine))
        az = mock_backend(script, name="az", provider="azure", deployment="gpt-4o",
                          api_key="k")
        async with gg.Gateway([ds, az], clock=clock, seed=1) as gate:
            first = await gate.chat(ASK, tools=TOOLS, max_tokens=400, stream=stream,
                                    backend="ds")
            assert first.raw is not None
            message: dict[str, Any] = first.raw["choices"][0]["message"]
            (call,) = message["tool_calls"]
            turn = [*ASK, message, {"role": "tool", "tool_call_id": call["id"],
                                    "content": "prime"}]
            elsewhere = await gate.chat(turn, tools=TOOLS, max_tokens=400, backend="az")
            back = await gate.chat(turn, tools=TOOLS, max_tokens=400, backend="ds",
                                   stream=stream)
        return message, elsewhere, back

    message, elsewhere, back = run_virtual(run)
    assert elsewhere.text == "It is prime."
    (sent,) = script.bodies
    assert "reasoning_content" not in sent["messages"][1]
    assert sent["messages"][1]["tool_calls"] == message["tool_calls"]
    assert message["reasoning_content"]  # the caller's message is untouched …
    assert back.finish_reason == "stop"  # … and DeepSeek still gets its reasoning


@pytest.mark.parametrize(
    ("provider", "kept"),
    [("azure", False), ("openai", False), ("gemini", False), ("groq", False),
     ("mistral", False), ("deepseek", True), ("vllm", True), ("openrouter", True),
     ("openai@http://127.0.0.1:8000/v1", True)],
)
def test_which_providers_get_the_reasoning_back(provider: str, kept: bool) -> None:
    """Strict hosted APIs refuse the field; DeepSeek needs it; a self-hosted server's chat
    template reads it (Qwen3's, DeepSeek-R1's); OpenRouter passes it on; ``"openai"``
    pointed at some other compatible server is not OpenAI."""
    from gptgate.providers import PROVIDERS
    from gptgate.wire.dialect import dialect_for

    provider, _, url = provider.partition("@")
    base_url = url or PROVIDERS[provider].base_url or "https://res.openai.azure.com"
    extra = {"deployment": "gpt-4o"} if provider == "azure" else {}
    backend = gg.Backend(name="b", provider=provider, model="m", api_key="k",
                         base_url=base_url, **extra)
    said = {"role": "assistant", "content": "", "reasoning_content": "7 is prime.",
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "lookup", "arguments": "{}"}}]}
    messages = [*ASK, said, {"role": "tool", "tool_call_id": "c1", "content": "prime"}]
    body = json.loads(dialect_for(backend).build_body("m", messages, {}, stream=False))
    assert ("reasoning_content" in body["messages"][1]) is kept
    assert body["messages"][1]["tool_calls"] == said["tool_calls"]
