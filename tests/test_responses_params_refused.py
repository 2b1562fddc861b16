"""A Responses API parameter given to ``gate.chat`` (chat completions) is refused before
anything is sent, naming what chat completions calls it (gptgate/responses_params.py). It was
sent as is: OpenAI answered a 400 after the round trip, and a self-hosted server (vLLM,
llama-server) ignored it without a word — ``max_output_tokens=100`` bounded nothing, and
gptgate's own reading of the bound (the rate budget, the stream rule, the tiers) saw none."""

from __future__ import annotations

from typing import Any

import pytest

import gptgate as gg
from tests.mockbackend import USER, Script, backend, gateway, ok


@pytest.mark.parametrize(("param", "value", "hint"), [
    ("max_output_tokens", 100, "max_completion_tokens"),
    ("instructions", "Be brief.", "system"),
    ("input", "hello", "messages"),
    ("previous_response_id", "resp_1", "http_client"),
])
async def test_a_responses_parameter_on_a_chat_call_is_refused_unsent(
    param: str, value: Any, hint: str
) -> None:
    script = Script(ok())
    async with gateway(backend(script)) as gate:
        with pytest.raises(gg.BadRequestError, match=hint) as raised:
            await gate.chat(USER, **{param: value})
        (item,) = await gate.map([{"messages": USER, param: value}])
        assert isinstance(item, gg.BadRequestError)
        result = await gate.chat(USER, extra_body={param: value})  # sent, as asked
    assert param in raised.value.message and "nothing was sent" in raised.value.message
    assert len(script.requests) == 1 and result.text == "hi there"


def test_the_sync_gateway_refuses_it_too() -> None:
    script = Script(ok())
    gate = gg.SyncGateway([backend(script)])
    with gate, pytest.raises(gg.BadRequestError, match="max_completion_tokens"):
        gate.chat(USER, max_output_tokens=100)
    assert script.requests == []
