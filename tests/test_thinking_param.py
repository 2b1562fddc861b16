"""Anthropic's ``thinking=`` in a fleet that also has OpenAI-dialect backends.

OpenAI and Azure answer a ``thinking`` field with a 400 ("Unrecognized request argument
supplied: thinking"); a call with ``thinking=`` that failed over from Claude to such a backend
used to send it there, and the failover answered with that 400 instead of an answer. Now the
OpenAI dialect never sends it: ``{"type": "disabled"}`` (no thinking, which is what a model
that does not think does anyway) is left out; an enabled budget is refused by a backend
whose model does not think — so the router leaves that backend out, as it does one that
refuses ``response_format`` — and dropped for a model that reasons anyway (o-series); DeepSeek
takes ``thinking`` in its OpenAI format (its thinking-mode switch) and gets it as it is."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

import gptgate as gg
from gptgate.providers import PROVIDERS
from gptgate.wire.dialect import dialect_for

from .mockbackend import Script, error, gateway, ok
from .mockbackend import backend as mock_backend

ON = {"type": "enabled", "budget_tokens": 1024}
OFF = {"type": "disabled"}
ASK = [{"role": "user", "content": "Is 7 prime?"}]


def _strict_openai(request: httpx2.Request) -> httpx2.Response:
    """An OpenAI-dialect server that, like api.openai.com and Azure, refuses a field it does
    not know."""
    known = {"model", "messages", "max_tokens", "max_completion_tokens", "stream",
             "stream_options", "temperature", "tools", "tool_choice", "reasoning_effort"}
    body = json.loads(request.content)
    for key in set(body) - known:
        return error(400, f"Unrecognized request argument supplied: {key}")
    return ok("Yes.")


def _claude_answer(request: httpx2.Request) -> httpx2.Response:
    message = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Yes, 7 is prime."}],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 6},
    }
    if not json.loads(request.content).get("stream"):
        return httpx2.Response(200, json=message)
    events = [
        ("message_start", {"type": "message_start", "message": {
            **message, "content": [], "stop_reason": None,
            "usage": {"input_tokens": 12, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "Yes, 7 is prime."}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                           "usage": {"output_tokens": 6}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
    return httpx2.Response(200, content=body.encode(),
                           headers={"content-type": "text/event-stream"})


def _fleet(claude: Script, oai: Script, **oai_options: Any) -> list[gg.Backend]:
    # Claude is the dear one: the router's own choice is the OpenAI backend
    return [
        mock_backend(claude, name="claude", provider="anthropic", api_key="sk-ant-test",
                     price=gg.Price(input_per_mtok=300.0, output_per_mtok=1500.0)),
        mock_backend(oai, name="oai", provider=oai_options.pop("provider", "openai"),
                     api_key="sk-test", **oai_options),
    ]


async def test_a_disabled_thinking_fails_over_without_the_field() -> None:
    """Claude is down (500s): the call fails over and the OpenAI backend answers — without
    the ``thinking`` field it would 400 on."""
    claude, oai = Script(error(500, "down")), Script(_strict_openai)
    async with gateway(*_fleet(claude, oai), max_attempts=4) as gate:
        result = await gate.chat(ASK, max_tokens=50, thinking=OFF)
    assert (result.backend, result.text) == ("oai", "Yes.")
    assert all("thinking" not in body for body in oai.bodies)


async def test_an_enabled_thinking_is_not_sent_to_a_model_that_does_not_think() -> None:
    """Claude is down: the call may not fail over to a model that cannot think, and the
    OpenAI backend never receives ``thinking`` (it would 400); Claude's own error is the
    call's."""
    claude, oai = Script(error(500, "down")), Script(_strict_openai)
    async with gateway(*_fleet(claude, oai), max_attempts=3) as gate:
        with pytest.raises(gg.GateError) as caught:
            await gate.chat(ASK, max_tokens=2048, thinking=ON)
    assert not isinstance(caught.value, gg.BadRequestError)
    assert oai.bodies == []
    assert len(claude.requests) == 3


async def test_a_thinking_call_goes_to_the_backend_that_thinks() -> None:
    """Both up: a plain call goes where the router likes (the cheap OpenAI backend), every
    ``thinking`` call to Claude."""
    claude, oai = Script(_claude_answer), Script(_strict_openai)
    async with gateway(*_fleet(claude, oai)) as gate:
        plain = [(await gate.chat(ASK, max_tokens=50)).backend for _ in range(3)]
        served = [(await gate.chat(ASK, max_tokens=2048, thinking=ON)).backend
                  for _ in range(6)]
    assert plain == ["oai"] * 3
    assert served == ["claude"] * 6
    assert json.loads(claude.requests[0].content)["thinking"] == ON


async def test_pinned_to_the_openai_backend_it_is_refused_before_sending() -> None:
    claude, oai = Script(_claude_answer), Script(_strict_openai)
    async with gateway(*_fleet(claude, oai)) as gate:
        with pytest.raises(gg.BadRequestError, match=r"'thinking'.*nothing was sent"):
            await gate.chat(ASK, max_tokens=2048, thinking=ON, backend="oai")
        # extra_body= still sends it, unchecked (a compatible server that takes it)
        with pytest.raises(gg.BadRequestError, match="Unrecognized request argument"):
            await gate.chat(ASK, max_tokens=2048, backend="oai",
                            extra_body={"thinking": ON})
    assert [json.loads(r.content).get("thinking") for r in oai.requests] == [ON]


def _body(provider: str, model: str, params: dict[str, Any], **backend: Any) -> dict[str, Any]:
    b = gg.Backend(name="b", provider=provider, model=model, api_key="k",
                   base_url=backend.pop("base_url", PROVIDERS[provider].base_url or
                                        "https://res.openai.azure.com"), **backend)
    body: dict[str, Any] = json.loads(dialect_for(b).build_body(model, ASK, params, stream=False))
    return body


def test_deepseek_takes_thinking_as_it_is() -> None:
    """DeepSeek's OpenAI format has ``thinking`` (its thinking-mode switch)."""
    assert _body("deepseek", "deepseek-chat", {"thinking": ON})["thinking"] == ON
    assert _body("deepseek", "deepseek-chat", {"thinking": OFF})["thinking"] == OFF


def test_a_reasoning_model_thinks_anyway_and_gets_no_field() -> None:
    body = _body("openai", "o4-mini", {"thinking": ON})
    assert "thinking" not in body
    body = _body("azure", "o3", {"thinking": ON}, deployment="o3")
    assert "thinking" not in body


def test_a_model_that_does_not_think_refuses_an_enabled_budget_on_every_openai_preset() -> None:
    for provider in ("openai", "azure", "vllm", "llamacpp", "gemini"):
        deployment = {"deployment": "gpt-4o"} if provider == "azure" else {}
        with pytest.raises(gg.BadRequestError, match=rf"{provider}.*'thinking'"):
            _body(provider, "gpt-4o", {"thinking": ON}, **deployment)
        assert "thinking" not in _body(provider, "gpt-4o", {"thinking": OFF}, **deployment)


def test_deepseek_in_thinking_mode_refuses_what_its_reasoner_ignores() -> None:
    """``thinking`` enabled puts deepseek-chat in thinking mode, where DeepSeek accepts and
    ignores the sampling parameters as deepseek-reasoner does: refused before sending, as
    they are for deepseek-reasoner, instead of a setting that silently does nothing."""
    with pytest.raises(gg.BadRequestError, match=r"'temperature'.*deepseek-chat"):
        _body("deepseek", "deepseek-chat", {"thinking": {"type": "enabled"}, "temperature": 0.2})
    with pytest.raises(gg.BadRequestError, match="'logprobs'"):
        _body("deepseek", "deepseek-chat", {"thinking": {"type": "enabled"}, "logprobs": True})
    # not thinking: deepseek-chat takes them
    assert _body("deepseek", "deepseek-chat", {"thinking": OFF, "temperature": 0.2})[
        "temperature"] == 0.2
    assert _body("deepseek", "deepseek-chat", {"temperature": 0.2})["temperature"] == 0.2


@pytest.mark.parametrize("param", ["top_k", "stop_sequences"])
async def test_anthropics_own_sampling_names_stay_off_openai_and_azure(param: str) -> None:
    """``top_k`` and ``stop_sequences`` are Anthropic's (the Messages API takes them as they
    are); OpenAI and Azure answer them with a 400 ("Unrecognized request argument supplied").
    A call with one goes to Claude; pinned to Azure it is refused, nothing sent."""
    value: Any = 40 if param == "top_k" else ["\n\nHuman:"]
    claude, oai = Script(_claude_answer), Script(_strict_openai)
    async with gateway(*_fleet(claude, oai, provider="azure", deployment="gpt-4o")) as gate:
        served = [(await gate.chat(ASK, max_tokens=50, **{param: value})).backend
                  for _ in range(3)]
        with pytest.raises(gg.BadRequestError, match=rf"'azure'.*'{param}'.*nothing was sent"):
            await gate.chat(ASK, max_tokens=50, backend="oai", **{param: value})
    assert served == ["claude"] * 3
    assert oai.bodies == []
    for provider in ("openai", "azure"):
        with pytest.raises(gg.BadRequestError, match=param):
            _body(provider, "gpt-4o", {param: value},
                  **({"deployment": "gpt-4o"} if provider == "azure" else {}))
    # any other OpenAI-compatible server (vLLM takes top_k) gets it as before
    assert _body("openai", "m", {param: value}, base_url="http://127.0.0.1:8000/v1")[param]
    assert _body("vllm", "m", {param: value})[param]
