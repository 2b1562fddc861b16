"""gpt-5-mini and gpt-5-nano bill an image by OpenAI's patch rule, not gpt-5's tiles.

platform.openai.com/docs/guides/images-vision, "Calculating costs", lists them with the patch
models and their multipliers: gpt-5-mini 1.62, gpt-5-nano 2.46 (gpt-4.1-mini's and
gpt-4.1-nano's). The estimate priced them as gpt-5 (512-px tiles: 1800×2400 → 765 tokens), so a
call with an image sent to gpt-5-nano reserved under a quarter of the 3,572 tokens the guide
gives it — the TPM hold, the dollar budget, the context check. (OpenAI's pricing calculator and
measured bills show 1.2 and 1.5: the guide's figures are the upper reading, as for the other
patch models.)
"""

from __future__ import annotations

from typing import Any

import pytest

import gptgate as gg
from gptgate.media_tokens import call_media_rule, media_rule, part_tokens
from tests.mediafiles import data_url, png


def _image(width: int, height: int) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url("image/png", png(width, height))}}


@pytest.mark.parametrize(
    ("model", "tokens"),
    [
        ("gpt-5-mini", 2353),  # 1,452 patches × 1.62 = 2,352.24
        ("gpt-5-mini-2025-08-07", 2353),  # a dated snapshot: the same model
        ("gpt-5-nano", 3572),  # × 2.46 = 3,571.92
        ("gpt-5-nano-2025-08-07", 3572),
        ("openai/gpt-5-nano", 3572),  # OpenRouter's name
    ],
)
def test_gpt5_mini_and_nano_count_an_image_by_patches(model: str, tokens: int) -> None:
    assert part_tokens(_image(1800, 2400), media_rule([("openai", model)])) == tokens


def test_gpt5_itself_keeps_the_tile_rule() -> None:
    assert media_rule([("openai", "gpt-5")]) == "openai"
    assert part_tokens(_image(1800, 2400), media_rule([("openai", "gpt-5")])) == 765


def test_a_gpt5_nano_backend_reserves_its_images_patches() -> None:
    backend = gg.Backend(name="nano", model="gpt-5-nano", base_url="http://127.0.0.1:9/v1")
    rule = call_media_rule([backend], None)
    remote = {"type": "image_url", "image_url": {"url": "https://example.com/photo.jpg"}}
    assert part_tokens(remote, rule) == 3779  # the largest: 1,536 patches × 2.46
