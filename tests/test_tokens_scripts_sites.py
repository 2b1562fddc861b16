"""Every place the token estimate steers what a user pays for or is refused by, with a prompt
in Chinese (gptgate/token_scripts.py). Before, each counted ~4 characters a token: the
188-character Chinese prompt of tests/scripts_text.py was 47 tokens, where o200k (gpt-4o,
gpt-5) counts 121 and the simulator, modelling o200k, 136.

* the rate pacer reserved a third of the prompt's tokens: a job under a TPM limit met 429s;
* the dollar budget admitted a call that alone costs more than the whole budget;
* the context check let a prompt too long for a small-context backend go to it, pinned or
  routed;
* an interrupted stream's billed output, booked in the ledger, was a third of what it was;
* the embeddings micro-batcher packed 3× the tokens a provider takes in one request.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import pytest

import gptgate as gg
from gptgate.errors import RequestTooLargeError, StreamInterruptedError
from gptgate.observe import ResponseTap
from gptgate.sim import SimEngine, SimTransport, get_profile
from gptgate.testing import LoopClock, run_virtual, sim_backend
from tests.scripts_text import PROMPTS, REAL_TOKENS
from tests.test_wire_stream import ROLE, chunk, reader_for

ZH = PROMPTS["zh"]
#: o200k's count of ZH
ZH_O200K = REAL_TOKENS["zh"][0]
PRICE = gg.Price(input_per_mtok=2.0, output_per_mtok=8.0)


def _chat_answer(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, json={
        "id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "好"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": ZH_O200K, "completion_tokens": 1},
    })


def test_the_pacer_reserves_a_chinese_prompts_tokens() -> None:
    reserved: list[int] = []

    async def main() -> None:
        backend = gg.Backend(name="b", model="m", base_url="http://127.0.0.1:9/v1",
                             transport=httpx2.MockTransport(_chat_answer))
        async with gg.Gateway([backend]) as gate:
            pacer = gate.backend_state("b").pacer
            reserve = pacer.reserve

            def spy(now: float, tokens: int, output: int = 0) -> float:
                reserved.append(tokens)
                return reserve(now, tokens, output)

            pacer.reserve = spy  # type: ignore[method-assign]
            await gate.chat([{"role": "user", "content": ZH}], max_tokens=10)

    anyio.run(main)
    assert reserved and reserved[0] >= ZH_O200K + 10


def test_the_simulator_counts_a_chinese_prompt_as_a_real_tokenizer_does() -> None:
    async def main() -> int:
        clock = LoopClock()
        backend, _ = sim_backend("gpu", name="sim", clock=clock, seed=1)
        async with gg.Gateway([backend], clock=clock, seed=1) as gate:
            result = await gate.chat([{"role": "user", "content": ZH}], max_tokens=5)
        return result.usage.input_tokens

    counted = run_virtual(main)
    assert ZH_O200K <= counted <= 1.2 * ZH_O200K
    # English: what the profiles always counted, ~4 characters a token
    english = PROMPTS["en"]

    async def english_main() -> int:
        clock = LoopClock()
        backend, _ = sim_backend("gpu", name="sim", clock=clock, seed=1)
        async with gg.Gateway([backend], clock=clock, seed=1) as gate:
            result = await gate.chat([{"role": "user", "content": english}], max_tokens=5)
        return result.usage.input_tokens

    assert run_virtual(english_main) == 4 + -(-len(english) // 4)


def test_a_chinese_job_under_a_tpm_limit_meets_no_429() -> None:
    # benchmarks/token_scripts.py's job, smaller: with the old estimate, 98 of 300 calls met a
    # 429 there (before, the simulator counted with the gateway's own estimate and showed none)
    async def main() -> tuple[int, int]:
        clock = LoopClock()
        profile = get_profile("gpu").model_copy(update={"tpm": 30_000, "rpm": None})
        backend, engine = sim_backend(profile, name="sim", clock=clock, seed=1, concurrency=32)
        items = [{"messages": [{"role": "user", "content": f"[{i}] {ZH * 6}"}],
                  "max_tokens": 100} for i in range(80)]
        async with gg.Gateway([backend], clock=clock, seed=1, max_attempts=8) as gate:
            results = await gate.map(items, scenario="batch_content")
        failed = sum(not isinstance(r, gg.ChatResult) for r in results)
        return engine.ledger.snapshot().rate_limited, failed

    assert run_virtual(main) == (0, 0)


def test_the_budget_refuses_a_chinese_call_dearer_than_the_whole_budget() -> None:
    # 12 × ZH: ~1,580 tokens at the simulator, $0.0032 at $2/M — over a $0.002 budget; the
    # estimate said 568 tokens ($0.0012) and it was sent
    async def main() -> tuple[int, BaseException | None]:
        clock = LoopClock()
        backend, engine = sim_backend("gpu", name="sim", clock=clock, seed=1, price=PRICE)
        budget = gg.Budget(usd_per_hour=0.002, on_exceed="raise")
        async with gg.Gateway([backend], clock=clock, seed=1, budget=budget) as gate:
            try:
                await gate.chat([{"role": "user", "content": ZH * 12}], max_tokens=10)
            except gg.BudgetExceededError as error:
                return engine.ledger.snapshot().requests, error
        return engine.ledger.snapshot().requests, None

    sent, error = run_virtual(main)
    assert (sent, type(error)) == (0, gg.BudgetExceededError)


def _small_and_large(clock: LoopClock) -> tuple[gg.Gateway, SimEngine, SimEngine]:
    small = SimEngine(get_profile("gpu").model_copy(update={"context_tokens": 2048}),
                      clock=clock, seed=1)
    large = SimEngine("gpu", clock=clock, seed=2)
    backends = [
        gg.Backend(name=name, model="m", base_url="http://127.0.0.1:8000/v1", context_tokens=ctx,
                   transport=SimTransport(engine))
        for name, ctx, engine in (("small", 2048, small), ("large", 32_768, large))
    ]
    return gg.Gateway(backends, clock=clock, seed=1), small, large


#: 40 × ZH: 7,520 characters, ~4,840 tokens at o200k — more than 2,048 on any tokenizer
LONG = [{"role": "user", "content": ZH * 40}]


def test_a_chinese_prompt_too_long_for_a_pinned_backend_is_refused_unsent() -> None:
    async def main() -> tuple[int, BaseException | None]:
        clock = LoopClock()
        gate, small, _ = _small_and_large(clock)
        async with gate:
            try:
                await gate.chat(LONG, backend="small", max_tokens=10)
            except RequestTooLargeError as error:
                return small.ledger.snapshot().requests, error
        return small.ledger.snapshot().requests, None

    sent, error = run_virtual(main)
    assert sent == 0 and isinstance(error, RequestTooLargeError) and error.status is None


def test_chinese_prompts_too_long_for_the_small_backend_are_routed_to_the_large() -> None:
    async def main() -> tuple[list[str], int]:
        clock = LoopClock()
        gate, small, _ = _small_and_large(clock)
        async with gate:
            results = await gate.map([{"messages": LONG, "max_tokens": 10}] * 6)
        return [getattr(r, "backend", repr(r)) for r in results], small.ledger.snapshot().requests

    backends, sent_to_small = run_virtual(main)
    assert backends == ["large"] * 6 and sent_to_small == 0


async def test_an_interrupted_chinese_stream_is_billed_its_tokens() -> None:
    half = len(ZH) // 2
    reader = reader_for(ROLE, chunk(ZH[:half]), chunk(ZH[half:]))
    with pytest.raises(StreamInterruptedError) as info:
        async for _ in reader:
            pass
    assert info.value.partial_text == ZH
    assert info.value.output_tokens >= ZH_O200K


def test_an_sdk_stream_left_mid_answer_is_booked_its_chinese_tokens() -> None:
    tap = ResponseTap("text/event-stream", 0.0)
    for piece in (ZH[:90], ZH[90:]):
        delta = {"choices": [{"index": 0, "delta": {"content": piece}}]}
        tap.feed(f"data: {json.dumps(delta, ensure_ascii=False)}\n\n".encode(), 1.0)
    assert tap.output_so_far() >= ZH_O200K


class _Recording(httpx2.AsyncBaseTransport):
    def __init__(self, engine: SimEngine) -> None:
        self.inner = SimTransport(engine)
        self.sent: list[list[str]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path.endswith("/embeddings"):
            self.sent.append(json.loads(request.content)["input"])
        return await self.inner.handle_async_request(request)


def test_the_embeddings_batcher_packs_chinese_texts_within_the_providers_token_cap() -> None:
    cap = 1000
    text = ZH * 3  # ~363 tokens at o200k: two fit a request, not three

    async def main() -> list[list[str]]:
        clock = LoopClock()
        recording = _Recording(SimEngine("gpu", clock=clock, seed=1))
        backend: dict[str, Any] = {
            "name": "emb", "base_url": "http://127.0.0.1:8000/v1", "model": "m",
            "embedding_model": "text-embedding-3-small", "embedding_max_tokens": cap,
        }
        gate = gg.Gateway([gg.Backend(transport=recording, **backend)], clock=clock,
                          embed_window_s=0.005, max_attempts=1)
        async with gate:
            await gate.embed([f"{i} {text}" for i in range(8)])
        return recording.sent

    sent = run_virtual(main)
    assert sum(len(r) for r in sent) == 8
    assert max(len(r) for r in sent) * 3 * ZH_O200K <= cap, [len(r) for r in sent]
