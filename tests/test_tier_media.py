"""An ask carrying media (an image, audio, a PDF) goes to a backend whose model takes it
(gptgate/media_fit.py, docs/tiers.md "Media"): a text-only small model is no place for "what
is this?" with a photo, whatever the classifier said — the server would answer a 400, or the
call's size would be misjudged by its text alone."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

import gptgate as gg
from gptgate.media_fit import call_media, model_media, refused_media
from gptgate.routing import BackendState
from gptgate.tiers import TierHeuristic
from tests.mockbackend import Script, backend
from tests.test_tiers import answer, down

PNG_1x1 = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAC"
    "hwGA60e6kgAAAABJRU5ErkJggg=="
)


def photo_ask(detail: str = "high", text: str = "what is this?") -> list[dict[str, Any]]:
    return [{"role": "user", "content": [
        {"type": "text", "text": text},
        {"type": "image_url", "image_url": {"url": PNG_1x1, "detail": detail}},
    ]}]


def remote_photo_ask() -> list[dict[str, Any]]:
    """A remote image: its size unseen, it counts the largest high-detail image (1,445)."""
    return [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
    ]}]


def tiers(small_media: Any = None, large_media: Any = None, *, small_model: str = "m",
          large_model: str = "m", **options: Any) -> tuple[gg.Gateway, Script, Script]:
    small, large = Script(answer()), Script(answer())
    gate = gg.Gateway([
        backend(small, name="small", tier="small", model=small_model, media=small_media),
        backend(large, name="large", tier="large", model=large_model, media=large_media),
    ], max_attempts=2, backoff_base_s=0.01, backoff_cap_s=0.02, **options)
    return gate, small, large


#: a text-only small model and one that takes images, known by their names
BY_NAME: dict[str, Any] = {"small_model": "gpt-3.5-turbo", "large_model": "gpt-4o"}


async def test_an_image_ask_a_classifier_calls_small_goes_to_the_tier_that_takes_images() -> None:
    gate, small, large = tiers(**BY_NAME, tier_classifier=lambda m, p: "small")
    async with gate:
        result = await gate.chat(photo_ask(), max_tokens=50)
        text = await gate.chat([{"role": "user", "content": "hi"}], max_tokens=50)
    assert (result.backend, result.tier) == ("large", "large")
    assert len(small.requests) == 1 and len(large.requests) == 1  # the text ask only on small
    assert text.backend == "small"


async def test_an_image_ask_never_falls_back_to_a_text_only_small_tier() -> None:
    """The large tier down: a text ask falls back to the small tier, an image ask does not
    (it would be a 400 there) — it waits for the large tier's circuit as a pinned call does."""
    gate, small, large = tiers(**BY_NAME, max_breaker_wait_s=0.0)
    async with gate:
        down(gate, "large")
        text = await gate.chat([{"role": "user", "content": "hi"}], max_tokens=50)
        with pytest.raises(gg.BackendError):
            await gate.chat(photo_ask(), max_tokens=50)
    assert text.backend == "small"
    assert len(small.requests) == 1 and large.requests == []


async def test_a_small_model_that_takes_images_answers_a_short_image_ask() -> None:
    """``TierHeuristic(media_large=False)``: an image no longer sends the call large by
    itself; its tokens count in the prompt's size."""
    heuristic = TierHeuristic(media_large=False)
    gate, _, _ = tiers(("image",), ("image",), tier_classifier=heuristic)
    async with gate:
        short = await gate.chat(photo_ask(detail="low"), max_tokens=50)
        big = await gate.chat(remote_photo_ask(), max_tokens=50)
    assert (short.backend, short.tier_reason) == ("small", "short_ask")
    assert (big.backend, big.tier_reason) == ("large", "long_prompt")  # ~1,600 + text > 1,500
    gate, small, _ = tiers((), ("image",), tier_classifier=heuristic)  # a text-only small
    async with gate:
        short = await gate.chat(photo_ask(detail="low"), max_tokens=50)
    assert (short.backend, short.tier, short.tier_reason) == ("large", "large", "short_ask")
    assert small.requests == []


def test_the_heuristic_counts_an_image_in_the_prompts_size() -> None:
    heuristic = TierHeuristic(media_large=False)
    assert heuristic(photo_ask(detail="low"), {"max_tokens": 50}) == ("small", "short_ask")
    assert heuristic(remote_photo_ask(), {"max_tokens": 50}) == ("large", "long_prompt")
    assert TierHeuristic()(photo_ask(detail="low"), {"max_tokens": 50}) == ("large", "images")
    refused = [{"role": "user", "content": "hi"},
               {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
               {"role": "user", "content": "ok"}]
    assert TierHeuristic()(refused, {"max_tokens": 50}) == ("small", "short_ask")


def test_the_media_a_call_carries() -> None:
    assert call_media([{"role": "user", "content": "hi"}]) == frozenset()
    assert call_media(photo_ask()) == {"image"}
    parts = [
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        {"type": "file", "file": {"file_id": "f"}},
        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
        {"type": "document", "source": {"type": "url", "url": "https://x/y.pdf"}},
        {"type": "input_image", "image_url": "https://x/y.png"},
        {"type": "text", "text": "and?"},
    ]
    assert call_media([{"role": "user", "content": parts}]) == {"image", "audio", "file"}
    # an assistant's refusal part is text, not media
    refusal = {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}
    assert call_media([refusal]) == frozenset()


@pytest.mark.parametrize(("model", "takes"), [
    ("gpt-4o-mini", {"image", "file"}),
    ("gpt-5.5", {"image", "file"}),
    ("claude-sonnet-4-5", {"image", "file"}),
    ("gemini-2.5-flash", {"image", "audio", "file"}),
    ("gpt-3.5-turbo", set()),
    ("o3-mini", set()),
    ("deepseek-chat", set()),
    ("qwen2.5-1.5b", None),  # unknown: the server decides
])
def test_known_models_media_by_name(model: str, takes: set[str] | None) -> None:
    got = model_media(gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model=model))
    assert got == (None if takes is None else frozenset(takes))


def test_a_declared_media_wins_over_the_models_name() -> None:
    declared = gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="gpt-4o", media=[])
    assert model_media(declared) == frozenset()
    with pytest.raises(pydantic.ValidationError, match="media"):
        gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="m", media=["video"])


async def test_when_no_backend_takes_the_media_none_is_left_out() -> None:
    """As for refused parameters: the server's own answer, not a gateway guess, when every
    backend would refuse."""
    gate, _, _ = tiers((), ())
    async with gate:
        states: list[BackendState] = list(gate.runner.router.states)
        assert refused_media(states, photo_ask()) == frozenset()
        assert refused_media(states[:1], photo_ask()) == frozenset()
    gate, _, _ = tiers((), None)
    async with gate:
        states = list(gate.runner.router.states)
        assert refused_media(states, photo_ask()) == {"small"}
        assert refused_media(states, [{"role": "user", "content": "hi"}]) == set()
