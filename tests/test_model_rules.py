"""Per-model parameter rules (gptgate/model_rules.py): ``deepseek-reasoner`` and OpenAI's
reasoning models (o1/o3/o4, gpt-5) on OpenAI and Azure refuse parameters other models of the
same provider take. Such a call is refused before anything is sent, naming the parameter,
the provider and the model; the others of the provider still go through."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

import gptgate as gg
from gptgate.model_rules import OPENAI_CHAT, OPENAI_REASONING, rule_for
from gptgate.sim import DEEPSEEK_PROFILE, LoopClock, get_profile, run_virtual
from gptgate.testing import sim_backend

from .mockbackend import Script, gateway
from .test_provider_azure import KEY, Recorder

USER = [{"role": "user", "content": "Think about pools."}]


async def _send(provider: str, model: str, params: dict[str, Any]) -> tuple[Any, int]:
    """One call over the simulator shaped like ``provider`` serving ``model``: the result (or
    the error) and how many requests reached the server."""
    clock = LoopClock()
    if provider == "deepseek":
        profile = DEEPSEEK_PROFILE.model_copy(update={"model": model})
        options: dict[str, Any] = {"base_url": "http://127.0.0.1:8000", "api_key": "sk-test"}
    else:
        profile = get_profile("gpu").model_copy(update={
            "flavor": "azure", "api_key": KEY, "model": model, "rpm": None, "tpm": None})
        options = {"base_url": "http://127.0.0.1:8000", "deployment": model, "api_key": KEY}
    backend, _ = sim_backend(profile, name="b", clock=clock, seed=1, provider=provider,
                             **options)
    recorder = Recorder(backend.transport)
    backend = backend.model_copy(update={"transport": recorder})
    async with gg.Gateway([backend], clock=clock, seed=1) as gate:
        try:
            result: Any = await gate.chat(USER, **params)
        except gg.GateError as error:
            result = error
    return result, len(recorder.requests)


@pytest.mark.parametrize(
    ("provider", "model", "param", "why"),
    [
        ("deepseek", "deepseek-reasoner", "logprobs", "rejects"),
        ("deepseek", "deepseek-reasoner", "top_logprobs", "rejects"),
        ("deepseek", "deepseek-reasoner", "temperature", "silently ignores"),
        ("deepseek", "deepseek-reasoner", "top_p", "silently ignores"),
        ("deepseek", "deepseek-reasoner", "presence_penalty", "silently ignores"),
        ("deepseek", "deepseek-reasoner", "frequency_penalty", "silently ignores"),
        ("azure", "o3-mini", "max_tokens", "rejects"),
        ("azure", "o4-mini", "temperature", "rejects"),
        ("azure", "gpt-5-mini", "logit_bias", "rejects"),
        ("azure", "o1", "presence_penalty", "rejects"),
    ],
)
def test_a_parameter_the_model_refuses_is_refused_before_sending(
    provider: str, model: str, param: str, why: str
) -> None:
    value = {"logit_bias": {"1": 1}, "max_tokens": 50, "logprobs": True,
             "top_logprobs": 2}.get(param, 0.2)  # of the parameter's type (else refused so)
    error, sent = run_virtual(_send, provider, model, {param: value})
    assert isinstance(error, gg.BadRequestError) and sent == 0
    assert f"provider {provider!r} {why} the parameter {param!r}" in error.message
    assert f"model {model!r}" in error.message
    if param == "max_tokens":
        assert "send max_completion_tokens= instead" in error.message


@pytest.mark.parametrize(
    ("provider", "model", "params"),
    [
        ("deepseek", "deepseek-chat", {"temperature": 0.2, "logprobs": True}),
        ("deepseek", "deepseek-reasoner", {"max_tokens": 50}),
        ("azure", "o3-mini", {"max_completion_tokens": 50, "temperature": 1}),
        ("azure", "gpt-5-chat", {"max_tokens": 50, "temperature": 0.2}),
        ("azure", "gpt-4o", {"max_tokens": 50, "top_p": 0.5}),
    ],
)
def test_what_the_model_takes_goes_through(
    provider: str, model: str, params: dict[str, Any]
) -> None:
    result, sent = run_virtual(_send, provider, model, params)
    assert isinstance(result, gg.ChatResult) and sent == 1


def _openai(base_url: str | None) -> tuple[gg.Backend, Script]:
    script = Script(httpx2.Response(200, json={"id": "c", "choices": [{"index": 0, "message": {
        "role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1}}))
    extra = {} if base_url is None else {"base_url": base_url}
    backend = gg.Backend(name="o", provider="openai", model="o3", api_key="sk-x",
                         transport=httpx2.MockTransport(script), **extra)
    return backend, script


async def test_on_openais_own_url_a_reasoning_model_refuses_max_tokens() -> None:
    backend, script = _openai(None)  # https://api.openai.com/v1
    async with gateway(backend) as gate:
        with pytest.raises(gg.BadRequestError, match="max_completion_tokens"):
            await gate.chat(USER, max_tokens=50)
        await gate.chat(USER, max_completion_tokens=50)
        await gate.chat(USER, extra_body={"max_tokens": 50})  # sent on purpose
    assert len(script.requests) == 2


async def test_the_default_preset_on_another_server_keeps_todays_path() -> None:
    """``provider="openai"`` is also any OpenAI-compatible server: a model that server
    calls "o3" is not OpenAI's, and its parameters go through as before."""
    backend, script = _openai("http://127.0.0.1:8000/v1")
    async with gateway(backend) as gate:
        await gate.chat(USER, max_tokens=50, temperature=0.3)
    assert len(script.requests) == 1


@pytest.mark.parametrize(
    ("model", "family"),
    [("o1", True), ("o1-mini", True), ("o3", True), ("O3-Pro", True), ("o4-mini", True),
     ("gpt-5", True), ("gpt-5-nano-2025-08-07", True), ("gpt-5-chat-latest", False),
     ("gpt-4o", False), ("gpt-4.1-mini", False), ("omni-moderation", False)],
)
def test_the_reasoning_family_is_named_by_model(model: str, family: bool) -> None:
    assert (rule_for((OPENAI_REASONING,), model) is not None) is family


def test_the_presets_carry_the_rules() -> None:
    # the reasoning family first (first match wins), then every other model's rule
    assert gg.PROVIDERS["azure"].models == (OPENAI_REASONING, OPENAI_CHAT)
    (reasoner,) = gg.PROVIDERS["deepseek"].models
    assert "logprobs" in reasoner.rejects and "temperature" in reasoner.ignores
