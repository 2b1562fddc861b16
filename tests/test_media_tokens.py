"""Image, audio and file parts in the prompt estimate (gptgate/media_tokens.py): each priced
by its provider's published rule from the file's header bytes, a part whose size cannot be
read counted at the documented default, never a crash and never logged."""

from __future__ import annotations

import base64
import logging
from typing import Any

import pytest

from gptgate.media_headers import image_size, mp3_seconds, pdf_pages
from gptgate.media_tokens import (
    ANTHROPIC_IMAGE_MAX,
    OPENAI_IMAGE_MAX,
    anthropic_image_tokens,
    media_rule,
    openai_image_tokens,
    part_tokens,
)
from gptgate.tokens import estimate_prompt_tokens
from tests.mediafiles import data_url, jpeg, pdf, png, wav


def _image(url: str, detail: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"url": url}
    if detail is not None:
        spec["detail"] = detail
    return {"type": "image_url", "image_url": spec}


def _ask(*parts: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": "What is shown?"}, *parts]}]


# -- the published formulas -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        ((1024, 1024), 765),  # OpenAI's examples: scaled to 768×768, 4 tiles
        ((2048, 4096), 1105),  # 1024×2048, then 768×1536: 6 tiles
        ((2048, 2048), 765),  # a square scales to 768×768 whatever its size
        ((500, 500), 255),  # one tile, no upscaling
        ((513, 500), 425),
        ((4000, 100), 85 + 170 * 4),  # fits 2048 wide; its short side is already < 768
    ],
)
def test_openai_tiles(size: tuple[int, int], tokens: int) -> None:
    assert openai_image_tokens(*size) == tokens
    assert openai_image_tokens(*size, "low") == 85


@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        ((200, 200), 54),  # Anthropic's table: ~54, ~1,334, ~1,590
        ((1000, 1000), 1334),
        ((1092, 1092), 1590),
        ((2048, 2048), ANTHROPIC_IMAGE_MAX),  # scaled down to ~1,600 tokens
        ((1568, 400), 837),  # at the long-edge limit: not scaled
        ((3136, 800), 837),  # twice that: halved on each side first
    ],
)
def test_anthropic_pixels_over_750(size: tuple[int, int], tokens: int) -> None:
    assert anthropic_image_tokens(*size) == tokens


# -- header readers on real files --------------------------------------------------------------


def test_dimensions_come_from_the_header_bytes_of_real_files() -> None:
    assert image_size(png(300, 200)) == (300, 200)
    assert image_size(jpeg(1000, 600)) == (1000, 600)  # after a 2 KB EXIF segment
    gif = b"GIF89a" + (640).to_bytes(2, "little") + (480).to_bytes(2, "little") + b"\x00" * 8
    assert image_size(gif) == (640, 480)
    lossy = b"RIFF\x00\x00\x00\x00WEBPVP8 " + b"\x00" * 7 + b"\x9d\x01\x2a"
    assert image_size(lossy + (800).to_bytes(2, "little") + (450).to_bytes(2, "little")) == (
        800, 450,
    )
    extended = b"RIFF\x00\x00\x00\x00WEBPVP8X" + b"\x00" * 8
    assert image_size(extended + (1919).to_bytes(3, "little") + (1079).to_bytes(3, "little")) == (
        1920, 1080,
    )
    assert image_size(b"not an image") is None
    assert pdf_pages(pdf(3)) == 3


def test_an_mp3_lasts_its_size_over_its_first_frames_bitrate() -> None:
    frame = b"\xff\xfb\x90\x00"  # MPEG-1 Layer III, 128 kbit/s
    assert mp3_seconds(frame, 16_000 * 3) == pytest.approx(3.0)


# -- parts in the prompt estimate --------------------------------------------------------------


def test_a_png_data_url_counts_its_tiles_by_detail() -> None:
    url = data_url("image/png", png(2048, 4096))
    text_only = estimate_prompt_tokens(_ask())
    assert estimate_prompt_tokens(_ask(_image(url))) == text_only + 1105  # detail auto: high
    assert estimate_prompt_tokens(_ask(_image(url, "high"))) == text_only + 1105
    assert estimate_prompt_tokens(_ask(_image(url, "low"))) == text_only + 85
    # a detail the server may or may not take is left to it, and estimated as high
    assert estimate_prompt_tokens(_ask(_image(url, "ultra"))) == text_only + 1105


def test_a_jpeg_data_url_under_each_rule() -> None:
    part = _image(data_url("image/jpeg", jpeg(1000, 1000)))
    assert part_tokens(part, "openai") == 765
    assert part_tokens(part, "anthropic") == 1334  # translated to an image block for Claude
    assert part_tokens(part, "both") == 1334


def test_anthropic_image_blocks() -> None:
    raw = base64.b64encode(png(1000, 1000)).decode()
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": raw}}
    assert part_tokens(block) == 1334
    remote = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    assert part_tokens(remote) == ANTHROPIC_IMAGE_MAX
    tool_result = {"type": "tool_result", "tool_use_id": "t", "content": [block]}
    message = {"role": "user", "content": [tool_result]}
    assert estimate_prompt_tokens([message]) == estimate_prompt_tokens(
        [{"role": "user", "content": []}]
    ) + 1334


def test_a_remote_image_counts_the_largest_it_may_be() -> None:
    remote = _image("https://example.com/photo.jpg")
    assert part_tokens(remote) == OPENAI_IMAGE_MAX == 1445
    assert part_tokens(_image("https://example.com/photo.jpg", "low")) == 85
    assert part_tokens(remote, "anthropic") == ANTHROPIC_IMAGE_MAX
    responses_api = {"type": "input_image", "image_url": "https://example.com/p.jpg"}
    assert part_tokens(responses_api) == OPENAI_IMAGE_MAX
    # what a refusal (context window, tokens per minute) may rest on: only what is known
    assert part_tokens(remote, unseen=False) == 0
    assert part_tokens(_image("https://example.com/photo.jpg", "low"), unseen=False) == 85
    assert part_tokens({"type": "file", "file": {"file_id": "f"}}, unseen=False) == 0


@pytest.mark.parametrize(
    "url",
    [
        "data:image/png;base64,%%%not base64%%%",
        "data:image/png,rawbytesnotbase64",  # not base64-encoded
        "data:image/png;base64,",
        data_url("image/png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 5),  # a header cut short
        data_url("image/jpeg", b"\xff\xd8\xff\xe0\x00"),
        "data:",
    ],
)
def test_a_malformed_data_url_counts_the_default_and_is_never_logged(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    assert part_tokens(_image(url)) == OPENAI_IMAGE_MAX
    assert part_tokens(_image(url), "anthropic") == ANTHROPIC_IMAGE_MAX
    assert not caplog.records


def test_a_part_that_is_not_a_mapping_or_has_no_url_does_not_crash() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": [
        "loose string", {"type": "image_url"}, {"type": "image_url", "image_url": 7},
        {"type": "image", "source": None}, {"type": "input_audio", "input_audio": None},
        {"type": "file", "file": "x"}, {"type": "document"},
    ]}]
    assert estimate_prompt_tokens(messages) > 2 * OPENAI_IMAGE_MAX


def test_audio_counts_ten_tokens_a_second() -> None:
    sound = base64.b64encode(wav(2.0)).decode()
    part = {"type": "input_audio", "input_audio": {"data": sound, "format": "wav"}}
    assert part_tokens(part) == 20
    unknown = {"type": "input_audio", "input_audio": {"data": "A" * 40_000, "format": "mp3"}}
    assert part_tokens(unknown) == 150  # 30,000 bytes at 16 kbit/s: 15 s


def test_a_pdf_counts_its_pages() -> None:
    file_part = {"type": "file", "file": {
        "filename": "r.pdf", "file_data": data_url("application/pdf", pdf(3)),
    }}
    assert part_tokens(file_part) == 3 * (3000 + OPENAI_IMAGE_MAX)
    document = {"type": "document", "source": {
        "type": "base64", "media_type": "application/pdf",
        "data": base64.b64encode(pdf(2)).decode(),
    }}
    assert part_tokens(document) == 2 * (3000 + ANTHROPIC_IMAGE_MAX)
    unseen = {"type": "file", "file": {"file_id": "file-abc"}}
    assert part_tokens(unseen) == 10 * (3000 + OPENAI_IMAGE_MAX)
    text_doc = {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                               "data": "x" * 400}}
    assert part_tokens(text_doc) == 100
    raw = base64.b64encode(png(200, 200)).decode()
    custom = {"type": "document", "source": {"type": "content", "content": [
        {"type": "text", "text": "y" * 80},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": raw}},
    ]}}
    assert part_tokens(custom) == 20 + 54


def test_the_rule_follows_the_gateways_providers() -> None:
    assert media_rule(["openai", "vllm", "azure"]) == "openai"
    assert media_rule(["anthropic"]) == "anthropic"
    assert media_rule(["openai", "anthropic"]) == "both"
