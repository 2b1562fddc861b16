"""The OpenAI-compatible presets of ``gg.PROVIDERS`` (issue 32), each over the simulator as
that provider answers: a chat and a stream billed as the server bills them (tokens and
dollars), tools through and tool calls back, a 429 burst with the provider's own headers
paced so that no more than 2 consecutive 429s are sent, and the parameters it refuses or
ignores refused before anything is sent. (Azure: tests/test_provider_azure.py; DeepSeek's
and Anthropic's own dialects have their own files.)"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import pytest

import gptgate as gg
from gptgate.param_types import PARAM_KINDS
from gptgate.sim import LoopClock, SimEngine, get_profile, run_virtual
from gptgate.testing import sim_backend

from .mockbackend import Script, gateway
from .test_provider_azure import (
    TOOLS,
    Recorder,
    _recorded,
    assert_billed_as_the_server_bills,
)

PRESETS = ["openai", "gemini", "groq", "openrouter", "together", "mistral",
           "vllm", "sglang", "llamacpp", "ollama", "lmstudio"]
PRICE = gg.Price(input_per_mtok=1.0, cached_input_per_mtok=0.25, output_per_mtok=4.0)
SYSTEM = {"role": "system", "content": "You answer questions about pools. " * 300}


def _sim(provider: str, clock: LoopClock, **update: Any) -> tuple[gg.Backend, SimEngine]:
    flavor = "llamacpp" if provider == "llamacpp" else "openai"
    profile = get_profile("gpu").model_copy(update={
        "flavor": flavor, "rpm": None, "tpm": None, "max_queue": None,
        "output_tokens_mean": 30.0, **update,
    })
    return sim_backend(
        profile, name="p", clock=clock, seed=2, provider=provider,
        base_url="http://127.0.0.1:8000/v1", concurrency=8, price=PRICE,
    )


async def _chats_and_streams(provider: str) -> tuple[gg.Gateway, SimEngine, int]:
    clock = LoopClock()
    backend, engine = _sim(provider, clock)
    answered = 0
    async with gg.Gateway([backend], clock=clock, seed=1) as gate:

        async def one(i: int) -> None:
            nonlocal answered
            messages = [SYSTEM, {"role": "user", "content": f"question {i}"}]
            if i % 2:
                async with gate.stream(messages, max_tokens=30) as s:
                    text = "".join([t async for t in s])
            else:
                text = (await gate.chat(messages, max_tokens=30)).text
            answered += bool(text)

        async with anyio.create_task_group() as tg:
            for i in range(12):
                tg.start_soon(one, i)
    return gate, engine, answered


@pytest.mark.parametrize("provider", PRESETS)
def test_chats_and_streams_are_billed_as_the_server_bills_them(provider: str) -> None:
    gate, engine, answered = run_virtual(_chats_and_streams, provider)
    assert answered == 12
    assert_billed_as_the_server_bills(gate, engine, PRICE, calls=12)


class _HeadersOf(Recorder):
    """A provider that states no limit: its 429s carry ``retry-after`` only."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await super().handle_async_request(request)
        for name in [n for n in response.headers if n.startswith("x-ratelimit-")]:
            del response.headers[name]
        return response


async def _burst(provider: str) -> tuple[list[Any], Recorder]:
    clock = LoopClock()
    preset = gg.PROVIDERS[provider]
    if preset.hosted:  # a rate limit: 2 requests a second, 40 at once to begin with
        backend, _ = _sim(provider, clock, rpm=120)
    else:  # a self-hosted server's 429: its queue is full
        backend, _ = _sim(provider, clock, slots=4, max_queue=4, queue_full_status=429)
    inner = backend.transport
    recorder = Recorder(inner) if preset.rate_limits else _HeadersOf(inner)
    backend = backend.model_copy(update={"transport": recorder, "concurrency": 16})
    async with gg.Gateway([backend], clock=clock, seed=1, max_attempts=6) as gate:
        items = [{"messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 20}
                 for i in range(150)]
        results = await gate.map(items)
    return results, recorder


@pytest.mark.parametrize("provider", PRESETS)
def test_a_429_burst_sends_no_more_than_two_429s_in_a_row(provider: str) -> None:
    results, recorder = run_virtual(_burst, provider)
    if not gg.PROVIDERS[provider].rate_limits:  # headers that state the limit pace below it
        assert 429 in recorder.statuses  # the limit was really hit
    assert recorder.longest_429_run() <= 2
    assert [r for r in results if isinstance(r, BaseException)] == []


def _refused(provider: str) -> list[str]:
    preset = gg.PROVIDERS[provider]
    return sorted(preset.rejects | preset.ignores)


#: a value of each kind of parameter gptgate checks the type of (gptgate/param_types.py):
#: a parameter of the wrong type is refused as such, before the provider's rules
_OF_KIND: dict[str, object] = {"number": 0.5, "int": 1, "bool": True, "str": "x", "list": [],
                               "dict": {"k": "v"}, "stop": "x", "tool_choice": "auto"}


def _value(param: str) -> object:
    kind = PARAM_KINDS.get(param)
    return 1 if kind is None else _OF_KIND[kind]


@pytest.mark.parametrize(
    ("provider", "param"),
    [(p, param) for p in PRESETS for param in _refused(p)],
)
async def test_a_parameter_the_provider_refuses_is_refused_before_sending(
    provider: str, param: str
) -> None:
    script = Script()
    backend = gg.Backend(
        name="p", provider=provider, model="m", transport=httpx2.MockTransport(script)
    )
    async with gateway(backend) as gate:
        with pytest.raises(gg.BadRequestError) as info:
            await gate.chat([{"role": "user", "content": "hi"}], **{param: _value(param)})
    assert f"provider {provider!r}" in info.value.message and repr(param) in info.value.message
    assert script.requests == []


def test_the_rules_name_what_the_providers_document() -> None:
    assert {"frequency_penalty", "store"} <= gg.PROVIDERS["gemini"].rejects
    assert {"logprobs", "logit_bias"} <= gg.PROVIDERS["groq"].rejects
    assert "num_ctx" in gg.PROVIDERS["ollama"].ignores
    assert not gg.PROVIDERS["openai"].rejects and not gg.PROVIDERS["vllm"].rejects


async def _tool_calls(provider: str) -> tuple[list[gg.ChatResult], list[httpx2.Request]]:
    clock = LoopClock()
    backend, _ = _sim(provider, clock)
    backend, recorder = _recorded(backend)
    async with gg.Gateway([backend], clock=clock, seed=1) as gate:
        messages = [{"role": "user", "content": "weather?"}]
        results = [await gate.chat(messages, tools=TOOLS, stream=s) for s in (False, True)]
        (call,) = results[0].raw["choices"][0]["message"]["tool_calls"]  # type: ignore[index]
        answered = await gate.chat([*messages, {
            "role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}], tools=TOOLS)
    return [*results, answered], recorder.requests


@pytest.mark.parametrize("provider", PRESETS)
def test_tools_go_through_and_tool_calls_come_back(provider: str) -> None:
    """Over the simulator: a chat and a stream answered with a tool call (the stream's
    ``delta.tool_calls`` pieces folded into one call), then a text answer to its result."""
    (chat, streamed, answered), requests = run_virtual(_tool_calls, provider)
    for r in (chat, streamed):
        assert r.finish_reason == "tool_calls" and r.raw is not None
        (call,) = r.raw["choices"][0]["message"]["tool_calls"]
        assert call["function"] == {"name": "get_weather", "arguments": '{"city":"sim"}'}
        assert call["id"].startswith("call_")
    assert answered.finish_reason == "stop" and answered.text
    calls = [q for q in requests if q.method == "POST"]  # not the signals reads (GET)
    assert len(calls) == 3 and all(json.loads(q.content)["tools"] == TOOLS for q in calls)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"provider": "openai", "signals": True}, "serves no /metrics"),
        ({"provider": "anthropic", "model": "claude-haiku-4-5", "signals": True}, "/metrics"),
        ({"provider": "azure", "base_url": "https://r.openai.azure.com", "deployment": "d",
          "signals": True}, "/metrics"),
        ({"provider": "anthropic", "model": "claude-haiku-4-5", "embedding_model": "e",
          "base_url": "http://127.0.0.1:9/v1"}, "no embeddings endpoint"),
        ({"provider": "deepseek", "embedding_model": "e"}, "no embeddings endpoint"),
    ],
)
def test_asking_a_hosted_provider_for_what_it_does_not_serve_fails_at_construction(
    fields: dict[str, Any], says: str,
) -> None:
    """Not at the first call, nor as a reading that stays stale for the process's life."""
    with pytest.raises(ValueError, match=says):
        gg.Backend(**{"name": "b", "model": "m", **fields})


@pytest.mark.parametrize(
    "fields",
    [
        {"provider": "openai", "base_url": "http://127.0.0.1:8000/v1", "signals": True},
        {"provider": "vllm", "signals": True},
        {"provider": "deepseek", "base_url": "http://127.0.0.1:9/v1", "embedding_model": "e"},
        {"provider": "openai", "embedding_model": "text-embedding-3-small"},
    ],
)
def test_the_same_asks_of_a_server_that_may_serve_them_are_accepted(
    fields: dict[str, Any],
) -> None:
    """The ``openai`` preset is every compatible server's; a preset pointed elsewhere (a
    proxy, the simulator) may serve what its own service does not."""
    gg.Backend(**{"name": "b", "model": "m", **fields})
