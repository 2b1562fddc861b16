"""A malformed answer to an SDK request on ``gate.http_client`` is billed work, booked as
``gate.chat`` books it: the server generated the whole answer before its body went out (the
simulator bills it ``malformed``, in full). The transport had booked nothing for it — in the
chaos suite the largest single gap between the gpu ledger and the server's bill, call by call
(gptgate/sim/chaos_books.py): a guarded SDK call's body cut in half, 196 tokens billed, none
booked."""

from __future__ import annotations

import json

import anyio
import httpx2
import openai
import pytest

import gptgate as gg
from tests.mockbackend import USER, Script, backend, completion, gateway

MAX_TOKENS = 40


def _malformed() -> httpx2.Response:
    """A chat completion's body cut in half (the simulator's ``garbage`` fault)."""
    body = json.dumps(completion("x" * 160, prompt=10)).encode()
    return httpx2.Response(
        200, content=body[: len(body) // 2], headers={"content-type": "application/json"}
    )


def _booked(gate: gg.Gateway) -> tuple[int, int, int, int]:
    entry = gate.ledger.entries["mock"]
    return entry.attempts, entry.input_tokens, entry.output_tokens, entry.wasted_tokens


async def _through_chat() -> tuple[int, int, int, int]:
    gate = gateway(backend(Script(_malformed())), max_attempts=1)
    async with gate:
        with pytest.raises(gg.GateError):
            await gate.chat(USER, max_tokens=MAX_TOKENS)
        return _booked(gate)


async def _through_sdk() -> tuple[tuple[int, int, int, int], int]:
    gate = gateway(backend(Script(_malformed())), max_attempts=1)
    async with gate:
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url="http://127.0.0.1:9/v1",
            http_client=gate.http_client("mock"), max_retries=0,
        )
        with pytest.raises(json.JSONDecodeError):  # the SDK cannot parse the body
            await client.chat.completions.create(
                model="m", messages=USER, max_tokens=MAX_TOKENS  # type: ignore[arg-type]
            )
        return _booked(gate), gate.stats()["mock"].failures


def test_a_malformed_answer_on_http_client_is_booked_as_gate_chat_books_it() -> None:
    chat = anyio.run(_through_chat)
    sdk, failures = anyio.run(_through_sdk)
    attempts, prompt, output, wasted = chat
    assert attempts == 1 and prompt > 0 and output == MAX_TOKENS  # nothing seen before: all
    assert wasted == prompt + output
    assert sdk == chat
    assert failures == 1  # the backend failed it: not a success to the breaker or the limit
