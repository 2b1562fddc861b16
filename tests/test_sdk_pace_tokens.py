"""An SDK request on ``gate.http_client`` is paced by its tokens, not only as one request
(gptgate/sdk_pace.py): it reserves its prompt's estimate and ``max_tokens`` at the backend's
pacer as ``gate.chat`` does, the response's ``x-ratelimit-*`` headers correct the budget,
and the usage it reports settles the reservation. Before, the SDK path reserved one request
and no tokens and read no rate-limit header: on a TPM-limited backend a burst of big SDK
requests went out as fast as the permits allowed and met 19 429s (in a guard or not, JSON
or streamed) where ``gate.chat``'s same job met none."""

from __future__ import annotations

import collections
import json
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import anyio
import httpx2
import openai
import pytest

import gptgate as gg
from gptgate.sdk_client import _json_body, _request_tokens
from gptgate.sim import ANTHROPIC_PROFILE, LoopClock, SimEngine, SimTransport, run_virtual
from gptgate.sim.profiles import get_profile
from tests.mockbackend import Script, backend, completion, gateway, sse

CALLS = 40
#: ~2,000 prompt tokens and 500 more of max_tokens: 2,500 a call against 50,000 a minute
PROMPT = "lorem ipsum " * 660
MAX_TOKENS = 500
TPM = 50_000
MESSAGES: list[Any] = [{"role": "user", "content": PROMPT}]



async def _outcomes(one: Callable[[], Awaitable[None]]) -> collections.Counter[str]:
    """``CALLS`` of ``one`` at once: how many ended ok, and the rest by exception type."""
    outcomes: collections.Counter[str] = collections.Counter()

    async def counted() -> None:
        try:
            await one()
            outcomes["ok"] += 1
        except Exception as exc:  # counted by type
            outcomes[type(exc).__name__] += 1

    async with anyio.create_task_group() as tg:
        for _ in range(CALLS):
            tg.start_soon(counted)
    return outcomes

def run_job(path: str, *, stream: bool) -> tuple[collections.Counter[str], int]:
    """``CALLS`` concurrent big calls on a simulated backend limited to ``TPM`` tokens a
    minute (virtual time, seeded) by ``path`` ("chat", "sdk" or "guard": the SDK in
    ``@gate.guard``): the outcomes and the server's 429s."""

    async def main() -> tuple[collections.Counter[str], int]:
        clock = LoopClock()
        profile = get_profile("hosted").model_copy(update={"rpm": None, "tpm": TPM})
        engine = SimEngine(profile, clock=clock, seed=4)
        hosted = gg.Backend(
            name="h", base_url="http://127.0.0.1:2/v1", model=profile.model,
            transport=SimTransport(engine), concurrency=16,
        )
        async with gg.Gateway([hosted], clock=clock, seed=1, max_attempts=10) as gate:
            # the job takes ~2 minutes of budget: the SDK's own timeout (the backend's
            # 60 s) would bound a request's wait for its turn
            client = openai.AsyncOpenAI(
                base_url="http://127.0.0.1:2/v1", api_key="k", max_retries=0, timeout=600.0,
                http_client=gate.http_client("h"),
            )

            async def sdk() -> None:
                if not stream:
                    await client.chat.completions.create(
                        model=profile.model, messages=MESSAGES, max_tokens=MAX_TOKENS
                    )
                    return
                chunks = await client.chat.completions.create(
                    model=profile.model, messages=MESSAGES, max_tokens=MAX_TOKENS,
                    stream=True, stream_options={"include_usage": True},
                )
                async for _ in chunks:
                    pass

            guarded = gate.guard(backend="h")(sdk)

            async def one() -> None:
                if path == "chat":
                    await gate.chat(MESSAGES, max_tokens=MAX_TOKENS, stream=stream)
                else:
                    await (sdk() if path == "sdk" else guarded())

            outcomes = await _outcomes(one)
        return outcomes, engine.ledger.snapshot().rate_limited

    return run_virtual(main)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_big_sdk_requests_meet_no_more_429s_than_gate_chat_on_a_tpm_limit(
    stream: bool,
) -> None:
    chat, chat_429s = run_job("chat", stream=stream)
    alone, alone_429s = run_job("sdk", stream=stream)
    guarded, guarded_429s = run_job("guard", stream=stream)
    assert chat == alone == guarded == {"ok": CALLS}
    # before: 0 for gate.chat, 19 for the SDK alone and in a guard
    assert alone_429s <= chat_429s, (alone_429s, chat_429s)
    assert guarded_429s <= chat_429s, (guarded_429s, chat_429s)


def run_anthropic_job(path: str) -> tuple[collections.Counter[str], int]:
    """The same job on the simulator's Messages API (``anthropic-ratelimit-*`` headers) by
    ``gate.chat`` or the ``anthropic`` SDK: the outcomes and the server's 429s."""

    async def main() -> tuple[collections.Counter[str], int]:
        clock = LoopClock()
        profile = ANTHROPIC_PROFILE.model_copy(update={"rpm": None, "tpm": TPM})
        engine = SimEngine(profile, clock=clock, seed=4)
        claude = gg.Backend(
            name="c", provider="anthropic", base_url="http://127.0.0.1:2",
            model=profile.model, api_key="sk-ant-test", transport=SimTransport(engine),
            concurrency=16,
        )
        async with gg.Gateway([claude], clock=clock, seed=1, max_attempts=10) as gate:
            client = anthropic.AsyncAnthropic(
                api_key="sk-ant-test", base_url="http://127.0.0.1:2", max_retries=0,
                timeout=600.0, http_client=gate.http_client("c"),
            )

            async def one() -> None:
                if path == "chat":
                    await gate.chat(MESSAGES, max_tokens=MAX_TOKENS)
                else:
                    await client.messages.create(
                        model=profile.model, messages=MESSAGES, max_tokens=MAX_TOKENS
                    )

            outcomes = await _outcomes(one)
        return outcomes, engine.ledger.snapshot().rate_limited

    return run_virtual(main)


def test_big_anthropic_sdk_requests_meet_no_more_429s_than_gate_chat() -> None:
    chat, chat_429s = run_anthropic_job("chat")
    sdk, sdk_429s = run_anthropic_job("sdk")
    assert chat == sdk == {"ok": CALLS}
    assert sdk_429s <= chat_429s, (sdk_429s, chat_429s)


#: the server's budget, as every answer reports it (a fixed remainder: no call counts)
LIMITS = {
    "x-ratelimit-limit-tokens": "100000", "x-ratelimit-remaining-tokens": "100000",
    "x-ratelimit-limit-requests": "1000", "x-ratelimit-remaining-requests": "1000",
}


def _answer(request: httpx2.Request) -> httpx2.Response:
    """A completion (JSON, or SSE with its usage when asked), with the budget's headers."""
    if json.loads(request.content).get("stream"):
        headers = {**LIMITS, "content-type": "text/event-stream"}
        return httpx2.Response(200, content=sse(["hi there"]), headers=headers)
    return httpx2.Response(200, json=completion("hi there"), headers=LIMITS)


async def _tokens_after(path: str, stream: bool) -> float:
    """The tokens the backend's pacer has left after one call by ``path``, reserved with
    ``max_tokens=500`` and settled with its usage."""
    clock = LoopClock()  # virtual: no refill between the report and the reading
    async with gateway(backend(Script(_answer)), clock=clock) as gate:
        if path == "chat":
            await gate.chat([{"role": "user", "content": "hello"}], max_tokens=500, stream=stream)
        else:
            client = openai.AsyncOpenAI(
                base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0,
                http_client=gate.http_client("mock"),
            )
            created = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hello"}], max_tokens=500,
                stream=stream,
            )
            if stream:
                async for _ in created:  # type: ignore[union-attr]
                    pass
        return gate._states["mock"].pacer.statistics(clock.now()).tokens_available


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_sdk_requests_reservation_is_settled_with_its_usage_as_gate_chats(
    stream: bool,
) -> None:
    """The report (its place in the sequence) and the usage's refund leave the budget where
    ``gate.chat``'s same call leaves it — before, the SDK's left it unknown (inf)."""
    chat = run_virtual(lambda: _tokens_after("chat", stream))
    sdk = run_virtual(lambda: _tokens_after("sdk", stream))
    assert chat < 100_000  # a known budget, its margin held back
    assert sdk == pytest.approx(chat)


def test_an_sdk_request_with_no_room_before_its_timeout_is_not_sent() -> None:
    """A budget with no room for the request before its pool timeout: answered at once with
    a 429 that names the budget and the way out, nothing sent, and its reservation given
    back (the next request is not held behind one that never went)."""
    run_virtual(_no_room)


async def _no_room() -> None:
    clock = LoopClock()
    spent = {**LIMITS, "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "60s"}
    script = Script(httpx2.Response(200, json=completion(prompt=9), headers=spent))
    async with gateway(backend(script), clock=clock) as gate:
        client = openai.AsyncOpenAI(
            base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0,
            http_client=gate.http_client("mock"),
        )
        messages: Any = [{"role": "user", "content": "hello"}]
        await client.chat.completions.create(model="m", messages=messages, max_tokens=5)
        pacer = gate._states["mock"].pacer
        before = pacer.statistics(clock.now()).tokens_available
        impatient = client.with_options(timeout=httpx2.Timeout(5.0, pool=0.5))
        with pytest.raises(openai.RateLimitError, match="rate budget") as caught:
            await impatient.chat.completions.create(model="m", messages=messages, max_tokens=500)
        assert "raise the client's timeout" in str(caught.value)
        assert len(script.requests) == 1
        assert pacer.statistics(clock.now()).tokens_available == pytest.approx(before)


def test_a_responses_api_request_is_sized_by_its_input_items() -> None:
    """The Responses API's ``input`` is a list of message items (and ``instructions`` its
    system prompt): sized as the same chat messages are, not as no prompt at all (which
    reserved only ``max_output_tokens`` for a prompt of any size)."""
    text = "lorem ipsum " * 100
    chat = httpx2.Request("POST", "http://h/v1/chat/completions", json={
        "model": "m", "max_tokens": 50, "messages": [
            {"role": "system", "content": "be brief"}, {"role": "user", "content": text},
        ],
    })
    responses = httpx2.Request("POST", "http://h/v1/responses", json={
        "model": "m", "max_output_tokens": 50, "instructions": "be brief",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": text}]}],
    })
    sized = {r.url.path: _request_tokens(r, _json_body(r)) for r in (chat, responses)}
    assert sized["/v1/responses"] > 300  # before: 50
    assert abs(sized["/v1/responses"] - sized["/v1/chat/completions"]) <= 8
