"""A call with an image reserves the image under a dollar budget, on every path the estimate
feeds (gate.chat, the SDK through gate.http_client), and the simulator bills the image by the
same published rule — so the ledger and the server's bill agree.

Before: image parts counted 0 tokens. A 2048×4096 image (1,105 tokens at OpenAI) reserved what
its one-line question did: a budget that a single such call overruns admitted it.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

import gptgate as gg
from gptgate.sim import ANTHROPIC_PROFILE, SimEngine
from gptgate.testing import LoopClock, run_virtual, sim_backend
from tests.mediafiles import data_url, jpeg, png

PRICE = gg.Price(input_per_mtok=2.0, output_per_mtok=8.0)
MAX_TOKENS = 10
QUESTION = {"type": "text", "text": "What is shown?"}
TEXT_ONLY = [{"role": "user", "content": [QUESTION]}]
#: OpenAI: 2048×4096 → 768×1536, 6 tiles: 85 + 6 × 170 = 1,105 tokens ($0.00221 at $2/M)
WITH_IMAGE = [{"role": "user", "content": [
    QUESTION, {"type": "image_url", "image_url": {"url": data_url("image/png", png(2048, 4096))}},
]}]
#: the text-only call reserves ~$0.0001, the image call ~$0.0023
BUDGET = gg.Budget(usd_per_hour=0.002, on_exceed="raise")


def claude_backend(clock: LoopClock) -> tuple[gg.Backend, SimEngine]:
    """A Claude backend on the simulator's Anthropic profile, named "claude"."""
    return sim_backend(
        ANTHROPIC_PROFILE, name="claude", clock=clock, seed=7, provider="anthropic",
        base_url="http://127.0.0.1:8000", api_key="sk-ant-test", price=PRICE,
        model="claude-sonnet-4-5",
    )


def _gateway(clock: LoopClock, budget: gg.Budget | None) -> tuple[gg.Gateway, SimEngine]:
    backend, engine = sim_backend("gpu", name="sim", clock=clock, seed=1, price=PRICE)
    return gg.Gateway([backend], clock=clock, seed=1, budget=budget), engine


def test_the_budget_admits_the_question_but_refuses_its_image() -> None:
    async def main() -> dict[str, Any]:
        clock = LoopClock()
        gate, engine = _gateway(clock, BUDGET)
        async with gate:
            await gate.chat(TEXT_ONLY, max_tokens=MAX_TOKENS)
            sent = engine.ledger.snapshot().requests
            with pytest.raises(gg.BudgetExceededError) as info:
                await gate.chat(WITH_IMAGE, max_tokens=MAX_TOKENS)
            return {"sent": engine.ledger.snapshot().requests - sent, "error": info.value}

    out = run_virtual(main)
    assert out["sent"] == 0  # refused before anything was sent
    assert "more than the whole budget" in str(out["error"])
    assert "base64" not in str(out["error"])  # the payload is never in the message


def test_the_sdk_through_http_client_reserves_the_image_too() -> None:
    async def main() -> dict[str, Any]:
        clock = LoopClock()
        gate, engine = _gateway(clock, BUDGET)
        async with gate:
            client = openai.AsyncOpenAI(
                api_key="sk-test", base_url="http://127.0.0.1:8000/v1",
                http_client=gate.http_client("sim"), max_retries=0,
            )
            await client.chat.completions.create(
                model="m", messages=TEXT_ONLY, max_tokens=MAX_TOKENS  # type: ignore[arg-type]
            )
            sent = engine.ledger.snapshot().requests
            with pytest.raises(openai.RateLimitError) as info:
                await client.chat.completions.create(
                    model="m", messages=WITH_IMAGE, max_tokens=MAX_TOKENS,  # type: ignore[arg-type]
                )
            return {"sent": engine.ledger.snapshot().requests - sent, "error": info.value}

    out = run_virtual(main)
    assert out["sent"] == 0 and "budget" in str(out["error"])


def test_the_simulator_bills_the_image_as_the_estimate_counts_it() -> None:
    async def main() -> dict[str, Any]:
        clock = LoopClock()
        gate, engine = _gateway(clock, gg.Budget(usd_per_hour=1.0))
        async with gate:
            text = await gate.chat(TEXT_ONLY, max_tokens=MAX_TOKENS)
            image = await gate.chat(WITH_IMAGE, max_tokens=MAX_TOKENS)
            return {
                "text": text.usage.input_tokens, "image": image.usage.input_tokens,
                "bill": engine.ledger.snapshot().billed_usd(PRICE),
                "ledger": gate.ledger.total().cost_usd,
            }

    out = run_virtual(main)
    assert out["image"] - out["text"] == 1105  # the server's own count, by the same rule
    assert out["ledger"] == pytest.approx(out["bill"])


def test_an_image_for_claude_is_reserved_by_anthropics_rule() -> None:
    """1000×1000: 765 tokens at OpenAI, 1,334 at Anthropic. On a Claude backend the
    image_url part is sent as an image block and billed 1,334: that is what is reserved."""
    ask = [{"role": "user", "content": [
        QUESTION, {"type": "image_url", "image_url": {"url": data_url("image/jpeg",
                                                                      jpeg(1000, 1000))}},
    ]}]

    async def main() -> dict[str, Any]:
        clock = LoopClock()
        backend, engine = claude_backend(clock)
        # ~$0.0020 reserved by OpenAI's 765 tokens would fit; ~$0.0035 by Anthropic's not
        budget = gg.Budget(usd_per_hour=0.0025, on_exceed="raise")
        async with gg.Gateway([backend], clock=clock, seed=1, budget=budget) as gate:
            with pytest.raises(gg.BudgetExceededError):
                await gate.chat(ask, max_tokens=MAX_TOKENS)
        async with gg.Gateway([backend], clock=clock, seed=1) as gate:
            text = await gate.chat(TEXT_ONLY, max_tokens=MAX_TOKENS)
            image = await gate.chat(ask, max_tokens=MAX_TOKENS)
        return {"text": text.usage.input_tokens, "image": image.usage.input_tokens,
                "sent": engine.ledger.snapshot().requests}

    out = run_virtual(main)
    assert out["sent"] == 2  # the refused call was never sent
    assert out["image"] - out["text"] == 1334 + 4  # Anthropic's rule (+ the block's overhead)


def test_a_guessed_image_size_never_refuses_a_call_for_its_context_window() -> None:
    """Four remote images: reserved at their largest (1,445 each), but the context check
    rests on what is known — the server decides. Four known 2048×4096 images (1,105 each)
    overflow a 1,000-token window and are refused before anything is sent."""
    remote = {"type": "image_url", "image_url": {"url": "https://example.com/photo.jpg"}}
    known = WITH_IMAGE[0]["content"][1]

    async def main() -> dict[str, Any]:
        clock = LoopClock()
        backend, engine = sim_backend(
            "gpu", name="sim", clock=clock, seed=1, price=PRICE, context_tokens=1000
        )
        async with gg.Gateway([backend], clock=clock, seed=1) as gate:
            sent = await gate.chat([{"role": "user", "content": [QUESTION, *[remote] * 4]}],
                                   max_tokens=MAX_TOKENS)
            with pytest.raises(gg.RequestTooLargeError):
                await gate.chat([{"role": "user", "content": [QUESTION, *[known] * 4]}],
                                max_tokens=MAX_TOKENS)
        return {"sent": sent, "requests": engine.ledger.snapshot().requests}

    out = run_virtual(main)
    assert out["requests"] == 1 and out["sent"].usage.input_tokens > 4 * 1445


def test_a_gateway_with_openai_and_claude_backends_reserves_the_dearer_rule() -> None:
    """An image_url part may go to either: 1000×1000 is 765 tokens at OpenAI, 1,334 at
    Anthropic, and a gateway with both reserves 1,334 for a call it may route to either (one
    pinned to a backend is priced by that backend's rule: tests/test_media_patch_rule.py)."""
    ask = [{"role": "user", "content": [
        QUESTION, {"type": "image_url", "image_url": {"url": data_url("image/png",
                                                                      png(1000, 1000))}},
    ]}]

    async def main() -> int:
        clock = LoopClock()
        gpt, engine = sim_backend("gpu", name="sim", clock=clock, seed=1, price=PRICE)
        claude, _ = claude_backend(clock)
        budget = gg.Budget(usd_per_hour=0.0025, on_exceed="raise")
        async with gg.Gateway([gpt], clock=clock, seed=1, budget=budget) as gate:
            await gate.chat(ask, max_tokens=MAX_TOKENS)  # 765 tokens: fits
        async with gg.Gateway([gpt, claude], clock=clock, seed=1, budget=budget) as gate:
            with pytest.raises(gg.BudgetExceededError):
                await gate.chat(ask, max_tokens=MAX_TOKENS)
        return engine.ledger.snapshot().requests

    assert run_virtual(main) == 1


def test_the_simulators_canonical_prompt_holds_the_images_tokens() -> None:
    """Token ``i`` is character ``4·i`` of the simulator's canonical prompt, images included,
    so its prefix cache tells two prompts apart by their images as by their text."""
    from gptgate.sim.cache import canonical_text
    from gptgate.tokens import estimate_prompt_tokens

    other = [{"role": "user", "content": [
        QUESTION, {"type": "image_url", "image_url": {"url": data_url("image/png",
                                                                      png(2048, 4095))}},
    ]}]
    text = canonical_text(WITH_IMAGE)
    assert len(text) == 4 * estimate_prompt_tokens(WITH_IMAGE)
    assert text != canonical_text(other) and len(text) == len(canonical_text(other))
