"""A stream cut before its usage chunk is booked as reading the cache its prefix's last whole
answer read, not as its whole prompt at the full input price.

An OpenAI-style stream says its usage only after the last delta. Found by a mixed run on the
simulator over HTTP (240 ``gate.stream`` calls over a shared ~2,000-token system prompt, each
left after 1-30 deltas): $1.71 booked where the server billed $0.51 (+235%) — every cached
prompt token booked at the full input price. The same for the openai SDK on
``gate.http_client`` and for a failed attempt booked at its prompt.
"""

from __future__ import annotations

from typing import Any

import openai

import gptgate as gg
from gptgate.sim import LoopClock, get_profile, run_virtual
from gptgate.testing import sim_backend

PRICE = gg.Price(input_per_mtok=3.0, output_per_mtok=15.0, cached_input_per_mtok=0.3)
SYSTEM = {"role": "system", "content": "You are a careful assistant. " * 300}  # ~2,000 tokens
BASE_URL = "http://127.0.0.1:8000/v1"
LEFT = 10


def _ask(i: int) -> list[dict[str, str]]:
    return [SYSTEM, {"role": "user", "content": f"Question {i}: name three teas."}]


def _run(path: str) -> tuple[Any, Any, float, float]:
    """Two whole answers over the prefix, then ``LEFT`` streams left after their first delta
    (on ``path``): the gateway's ledger entry, the server's, and both in dollars."""

    async def main() -> tuple[Any, Any, float, float]:
        clock = LoopClock()
        profile = get_profile("gpu").model_copy(update={"output_tokens_mean": 300})
        backend, engine = sim_backend(
            profile, name="b", clock=clock, seed=5, price=PRICE, concurrency=4
        )
        async with gg.Gateway([backend], clock=clock, seed=1) as gate:
            client = openai.AsyncOpenAI(
                api_key="x", base_url=BASE_URL, http_client=gate.http_client("b"),
                max_retries=0,
            )
            for i in range(2):
                if path == "gate.stream":
                    await gate.chat(_ask(i), max_tokens=40)
                else:
                    await client.chat.completions.create(
                        model="m", messages=_ask(i), max_tokens=40  # type: ignore[arg-type]
                    )
            for i in range(2, 2 + LEFT):
                if path == "gate.stream":
                    async with gate.stream(_ask(i), max_tokens=300) as stream:
                        async for _ in stream:
                            break
                    continue
                sdk_stream = await client.chat.completions.create(
                    model="m", messages=_ask(i), max_tokens=300, stream=True,  # type: ignore[arg-type]
                )
                async for _ in sdk_stream:
                    break
                await sdk_stream.close()
            await clock.sleep(60.0)  # every hang-up noticed, every estimate settled
            entry = gate.ledger.entries["b"]
        snap = engine.ledger.snapshot()
        return entry, snap, entry.cost_usd, snap.bill_usd(PRICE)

    return run_virtual(main)


def _check(path: str) -> None:
    booked, billed, cost, bill = _run(path)
    assert billed.cached_input_tokens > LEFT * 1_500  # the server read the prefix each time
    assert booked.input_tokens == billed.input_tokens
    assert booked.cached_input_tokens == billed.cached_input_tokens  # was: the two whole ones'
    assert abs(cost - bill) <= 0.05 * bill  # was 2.5x the bill


def test_gate_streams_left_mid_answer_book_their_prefixs_cache_reads() -> None:
    _check("gate.stream")


def test_sdk_streams_left_mid_answer_book_their_prefixs_cache_reads() -> None:
    _check("sdk")
