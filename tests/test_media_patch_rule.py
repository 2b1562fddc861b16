"""OpenAI's patch rule for gpt-4.1-mini, gpt-4.1-nano and o4-mini, and the pinned backend's
rule on a mixed gateway (gptgate/media_tokens.py).

platform.openai.com/docs/guides/images-vision, "Calculating costs": these models cover the
image with 32-px patches, scaled down to fit at most 1,536 patches, and bill the patches times
a per-model multiplier (gpt-4.1-mini 1.62, gpt-4.1-nano 2.46, o4-mini 1.72). The guide's worked
examples: 1024×1024 is 1,024 patches; 1800×2400 is 1,452 (scaled by 0.603, then again to a
whole 33 patches wide: 1056×1408, 33 × 44). The 512-px tile rule the estimate used for every
OpenAI model counts 1800×2400 as 765 tokens — gpt-4.1-mini bills 2,353 — and an unreadable
image as 1,445, where gpt-4.1-nano may bill 3,779.

A gateway with both OpenAI and Claude backends reserved an ``image_url`` by the dearer of the
two rules even for a call pinned to one backend (``backend=``); the call goes there only, so
its rule is that backend's.
"""

from __future__ import annotations

from typing import Any

import pytest

import gptgate as gg
from gptgate.media_tokens import (
    media_rule,
    openai_image_tokens,
    openai_patch_tokens,
    part_tokens,
)
from gptgate.testing import LoopClock, run_virtual, sim_backend
from tests.mediafiles import data_url, png
from tests.test_media_budget import PRICE, QUESTION, claude_backend


def _image(width: int, height: int) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url("image/png", png(width, height))}}


@pytest.mark.parametrize(
    ("size", "patches"),
    [
        ((1024, 1024), 1024),  # the guide's first example: 32 × 32 patches
        ((1800, 2400), 1452),  # its second: 57 × 75 = 4,275, scaled to 33 × 44
        ((32, 32), 1),
        ((33, 32), 2),  # a patch may reach past the image
        ((1536 * 32, 32), 1536),  # one row: scaled to fit the cap
    ],
)
def test_the_patch_counts_of_the_guides_examples(size: tuple[int, int], patches: int) -> None:
    assert openai_patch_tokens(*size) == patches
    assert openai_patch_tokens(*size, multiplier=1.62) == -(-patches * 162 // 100)


@pytest.mark.parametrize(
    ("model", "tokens"),
    [
        ("gpt-4.1-mini", 2353),  # 1,452 × 1.62 = 2,352.24
        ("gpt-4.1-mini-2025-04-14", 2353),  # a dated snapshot: the same model
        ("gpt-4.1-nano", 3572),  # × 2.46 = 3,571.92
        ("o4-mini", 2498),  # × 1.72 = 2,497.44
        ("openai/gpt-4.1-mini", 2353),  # OpenRouter's name
    ],
)
def test_a_patch_model_counts_its_image_by_patches(model: str, tokens: int) -> None:
    part = _image(1800, 2400)
    assert part_tokens(part) == openai_image_tokens(1800, 2400) == 765  # the tile rule
    assert part_tokens(part, media_rule([("openai", model)])) == tokens


def test_tile_models_keep_the_tile_rule() -> None:
    for model in ("gpt-4o", "gpt-4.1", "gpt-4o-mini", None):
        assert media_rule([("openai", model)]) == "openai"


def test_an_unreadable_image_counts_the_largest_of_its_model() -> None:
    remote = {"type": "image_url", "image_url": {"url": "https://example.com/photo.jpg"}}
    assert part_tokens(remote) == 1445
    assert part_tokens(remote, media_rule([("openai", "gpt-4.1-nano")])) == 3779  # 1,536 × 2.46
    assert part_tokens(remote, media_rule([("openai", "gpt-4.1-nano")]), unseen=False) == 0
    # a gateway of a patch model and a tile model (or Claude) reserves the dearer
    mixed = media_rule([("openai", "gpt-4o"), ("openai", "gpt-4.1-mini")])
    assert part_tokens(_image(1800, 2400), mixed) == 2353
    assert part_tokens(_image(1800, 2400), media_rule(
        [("openai", "gpt-4o"), ("anthropic", "claude-sonnet-4-5")])) == 1600


def test_a_gpt_4_1_mini_backend_reserves_its_image_by_patches() -> None:
    """1800×2400: the tile rule's 765 tokens (~$0.0015) fit a $0.0025 budget; the 2,353
    gpt-4.1-mini bills (~$0.0047) do not — refused before anything is sent."""
    ask = [{"role": "user", "content": [QUESTION, _image(1800, 2400)]}]

    async def main() -> tuple[int, int]:
        clock = LoopClock()
        budget = gg.Budget(usd_per_hour=0.0025, on_exceed="raise")
        tiles, tiles_engine = sim_backend("gpu", name="4o", clock=clock, seed=1, price=PRICE,
                                          model="gpt-4o")
        patches, patches_engine = sim_backend("gpu", name="mini", clock=clock, seed=1,
                                              price=PRICE, model="gpt-4.1-mini")
        async with gg.Gateway([tiles], clock=clock, seed=1, budget=budget) as gate:
            await gate.chat(ask, max_tokens=10)
        async with gg.Gateway([patches], clock=clock, seed=1, budget=budget) as gate:
            with pytest.raises(gg.BudgetExceededError):
                await gate.chat(ask, max_tokens=10)
        return tiles_engine.ledger.snapshot().requests, patches_engine.ledger.snapshot().requests

    assert run_virtual(main) == (1, 0)


def test_a_call_pinned_to_one_backend_reserves_by_its_rule() -> None:
    """1000×1000 is 765 tokens at OpenAI, 1,334 at Anthropic. On a gateway with both, a call
    pinned to the OpenAI backend reserves 765 (fits a $0.0025 budget); one that may go to
    either, the dearer 1,334 (refused); one pinned to Claude, 1,334."""
    ask = [{"role": "user", "content": [QUESTION, _image(1000, 1000)]}]

    async def main() -> tuple[int, list[str]]:
        clock = LoopClock()
        gpt, engine = sim_backend("gpu", name="sim", clock=clock, seed=1, price=PRICE)
        claude, _ = claude_backend(clock)
        refused: list[str] = []
        budget = gg.Budget(usd_per_hour=0.0025, on_exceed="raise")
        async with gg.Gateway([gpt, claude], clock=clock, seed=1, budget=budget) as gate:
            await gate.chat(ask, max_tokens=10, backend="sim")
            for pinned in (None, "claude"):
                with pytest.raises(gg.BudgetExceededError):
                    await gate.chat(ask, max_tokens=10, backend=pinned)
                refused.append(str(pinned))
        return engine.ledger.snapshot().requests, refused

    assert run_virtual(main) == (1, ["None", "claude"])
