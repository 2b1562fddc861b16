"""The prompt tokens of a message's image, audio and file parts, by the providers' published
rules.

Why: the prompt estimate (gptgate/tokens.py, ~4 characters a token) saw only text, so an
image counted 0 tokens though the provider bills it up to ~1,600. A call with images was
under-reserved everywhere the estimate is used: the dollar budget's reservation and refusal,
the rate-limit (TPM) hold, the context-window check, the cache gate's prefix size, Batch API
sizing, and the ledger's cost of an attempt that ended before the server said its usage.

The rules (each a conservative reading of the provider's documentation):

* **OpenAI ``image_url``** (and the Responses API's ``input_image``) — platform.openai.com
  /docs/guides/vision, "Calculating costs": ``detail: "low"`` is 85 tokens; ``"high"`` (and
  ``"auto"``, and any other value, which is left to the server) scales the image to fit
  2048×2048, then its shortest side to 768 px, and costs 85 + 170 per 512-px tile (1024×1024
  → 765, 2048×4096 → 1,105). The dimensions come from the data: URL's header bytes
  (gptgate/media_headers.py); a remote URL, a ``file_id`` or an unreadable payload counts the
  largest high-detail image, 85 + 8 × 170 = 1,445 (a low-detail one, 85).
* **OpenAI's patch models** (gpt-5-mini, gpt-5-nano, gpt-4.1-mini, gpt-4.1-nano, o4-mini;
  the same guide) — the image is covered with 32-px patches; more than 1,536 scale it down to
  fit 1,536 (by ``sqrt(32² × 1536 / (w × h))``, then again to a whole number of patches across
  its tighter side), and the patches are billed times the model's multiplier: 1.62
  (gpt-5-mini, gpt-4.1-mini), 2.46 (gpt-5-nano, gpt-4.1-nano), 1.72 (o4-mini); gpt-5 itself
  bills tiles. (OpenAI's pricing calculator, and bills users measured, give gpt-5-mini 1.2
  and gpt-5-nano 1.5: the guide's multipliers are the upper reading, kept for a reservation.)
  The guide's examples: 1024×1024 is 1,024 patches, 1800×2400 1,452 — 2,353 tokens on
  gpt-4.1-mini, where the tile rule counts 765. ``detail`` does not change it. An unreadable
  image counts 1,536 patches (3,779 tokens on gpt-4.1-nano).
* **Anthropic ``image`` blocks** — docs.anthropic.com/en/docs/build-with-claude/vision,
  "Calculate image costs": ``tokens = (width × height) / 750`` after the image is scaled to a
  long edge of at most 1,568 px and at most ~1,600 tokens (1092×1092 → 1,590). A ``url`` or
  ``file`` source, or an unreadable one, counts the cap, 1,600.
* **Audio** (``input_audio``) — ~10 tokens a second of sound (OpenAI's audio models bill
  about one input token per 100 ms). The duration comes from a WAV header or an MP3 frame's
  bitrate; otherwise from the payload's size at 16 kbit/s (a low bitrate: a longer, dearer
  guess).
* **PDF** (OpenAI ``file`` / ``input_file``, Anthropic ``document``) — both providers send
  each page as its extracted text *and* an image of the page (docs.anthropic.com/en/docs/
  build-with-claude/pdf-support: "1,500-3,000 tokens per page" of text, plus the image's
  cost). A page counts 3,000 tokens plus the largest image of the rule. The pages come from
  the page tree's ``/Count`` (read in the file's first and last ~190 KB, where writers put
  it); when that is unreadable (a compressed object stream), one page
  per 100 KB of file, 1 to 50 pages; a PDF not in the request (``file_id``, a URL): 10 pages.
  A text ``document`` counts its text.

The rule depends on where the call goes. Native Anthropic blocks go to Anthropic; OpenAI
parts go to OpenAI-compatible servers, or — on a gateway with an Anthropic backend — may be
translated to Anthropic blocks (gptgate/wire/anthropic_messages.py). :func:`media_rule`
takes the backends a call may go to — ``(provider, model)`` pairs, or bare providers — and
picks the dearer of their formulas (``"both"`` for OpenAI's tiles and Anthropic's), so a
call's estimate never falls below what any of their bills may be; a call pinned to one
backend (``backend=``) is priced by that backend's formula alone (:func:`call_media_rule`).

Nothing here raises on bad input and nothing is logged: a malformed part counts the default,
and the server, not the estimate, says whether it is valid.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeAlias

from .media_headers import (
    HEAD_CHARS,
    b64_bytes,
    b64_head,
    image_size,
    mp3_seconds,
    pdf_pages,
    wav_seconds,
)
from .providers import PROVIDERS

__all__ = [
    "ANTHROPIC_IMAGE_MAX",
    "OPENAI_IMAGE_LOW",
    "OPENAI_IMAGE_MAX",
    "OPENAI_PATCH_MULTIPLIERS",
    "MediaRule",
    "anthropic_image_tokens",
    "call_media_rule",
    "content_media_tokens",
    "media_rule",
    "openai_image_tokens",
    "openai_patch_tokens",
    "part_tokens",
]

#: which formulas price an OpenAI-style image part, the dearest counting: OpenAI's tiles
#: (``"openai"``), Anthropic's (``"anthropic"``), both (``"both"``) — or, where a patch model
#: is among them, a set of ``"tiles"``, ``"anthropic"`` and patch multipliers
MediaRule: TypeAlias = Literal["openai", "anthropic", "both"] | frozenset[str | float]

#: OpenAI's models that bill an image by 32-px patches, and their multipliers (a dated
#: snapshot, ``gpt-4.1-mini-2025-04-14``, is its model's)
OPENAI_PATCH_MULTIPLIERS: dict[str, float] = {
    "gpt-5-mini": 1.62, "gpt-5-nano": 2.46,
    "gpt-4.1-mini": 1.62, "gpt-4.1-nano": 2.46, "o4-mini": 1.72,
}
_PATCH_PX = 32
_PATCH_CAP = 1536
_NAMED: dict[str, frozenset[str | float]] = {
    "openai": frozenset({"tiles"}),
    "anthropic": frozenset({"anthropic"}),
    "both": frozenset({"tiles", "anthropic"}),
}

OPENAI_IMAGE_LOW = 85
_OPENAI_TILE = 170
#: the dearest high-detail image: 768×2048 after scaling, 2 × 4 tiles
OPENAI_IMAGE_MAX = OPENAI_IMAGE_LOW + 8 * _OPENAI_TILE
#: Anthropic scales an image above ~1,600 tokens (or a 1,568-px long edge) down to fit
ANTHROPIC_IMAGE_MAX = 1600
_ANTHROPIC_LONG_EDGE = 1568
_ANTHROPIC_PIXELS_PER_TOKEN = 750

AUDIO_TOKENS_PER_S = 10
#: the bitrate a sound of unreadable length is taken to have (bytes a second): 16 kbit/s
_AUDIO_FALLBACK_BYTES_PER_S = 2000

PDF_TEXT_TOKENS_PER_PAGE = 3000
_PDF_BYTES_PER_PAGE = 100_000
_PDF_MAX_GUESSED_PAGES = 50
PDF_UNSEEN_PAGES = 10
#: the estimate runs on the event loop: of a PDF it decodes this much base64 at each end
#: (where writers put the page tree's root), not the whole file
_PDF_END_CHARS = 256 * 1024


def openai_image_tokens(width: int, height: int, detail: str = "high") -> int:
    """OpenAI's tile formula (gpt-4o family; see the module docstring)."""
    if detail == "low":
        return OPENAI_IMAGE_LOW
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = max(1, round(w * scale)), max(1, round(h * scale))
    return OPENAI_IMAGE_LOW + _OPENAI_TILE * math.ceil(w / 512) * math.ceil(h / 512)


def openai_patch_tokens(width: int, height: int, multiplier: float = 1.0) -> int:
    """OpenAI's patch formula (gpt-5-mini, gpt-5-nano, gpt-4.1-mini, …; see the module
    docstring): the 32-px patches covering the image, scaled down to at most 1,536, times
    the model's ``multiplier`` (rounded up)."""
    patches = _patches(width, height)
    return _ceil(patches * multiplier) if multiplier != 1.0 else patches


def _patches(width: int, height: int) -> int:
    raw = _ceil(width / _PATCH_PX) * _ceil(height / _PATCH_PX)
    if raw <= _PATCH_CAP:
        return raw
    r = math.sqrt(_PATCH_PX * _PATCH_PX * _PATCH_CAP / (width * height))
    across, down = width * r / _PATCH_PX, height * r / _PATCH_PX
    r *= min(math.floor(across) / across, math.floor(down) / down)
    covered = _ceil(width * r / _PATCH_PX) * _ceil(height * r / _PATCH_PX)
    return min(_PATCH_CAP, covered)


def _ceil(x: float) -> int:
    """``ceil``, forgiving the float error of a value that is whole (1408 / 32 = 44)."""
    return math.ceil(x - 1e-9)


def anthropic_image_tokens(width: int, height: int) -> int:
    """Anthropic's ``(width × height) / 750`` after its resize (see the module docstring)."""
    scale = min(1.0, _ANTHROPIC_LONG_EDGE / max(width, height))
    tokens = math.ceil(width * height * scale * scale / _ANTHROPIC_PIXELS_PER_TOKEN)
    return min(ANTHROPIC_IMAGE_MAX, tokens)


def media_rule(backends: Iterable[str | tuple[str, object]]) -> MediaRule:
    """The rule for OpenAI-style parts sent to any of ``backends`` — ``(provider, model)``
    pairs (``Backend.provider``, ``Backend.model``), or bare providers: Anthropic's formula
    for one that speaks its dialect, OpenAI's patches for a patch model, else its tiles; the
    dearest of them where they differ."""
    rules: set[str | float] = set()
    for backend in backends:
        provider, model = (backend, None) if isinstance(backend, str) else backend
        if _dialect(provider) == "anthropic":
            rules.add("anthropic")
        else:
            multiplier = _patch_multiplier(model)
            rules.add("tiles" if multiplier is None else multiplier)
    for name, named in _NAMED.items():
        if rules == named:
            return name  # type: ignore[return-value]
    return frozenset(rules) if rules else "openai"


def call_media_rule(
    backends: Iterable[Any], pinned: str | None, model: object = None
) -> MediaRule:
    """The rule of a call that may go to any of ``backends`` (``Backend`` objects), or only
    to ``pinned`` (``backend=``); ``model``: the call's own ``model=``, sent instead of each
    backend's."""
    return media_rule(
        (b.provider, model if isinstance(model, str) and model else b.model)
        for b in backends if pinned is None or b.name == pinned
    )


def _patch_multiplier(model: object) -> float | None:
    if not isinstance(model, str) or not model:
        return None
    name = model.rsplit("/", 1)[-1]  # OpenRouter's "openai/gpt-4.1-mini"
    for prefix, multiplier in OPENAI_PATCH_MULTIPLIERS.items():
        if name == prefix or name.startswith(prefix + "-20"):
            return multiplier
    return None


def _dialect(provider: str) -> str:
    preset = PROVIDERS.get(provider)
    return preset.dialect if preset is not None else provider


def content_media_tokens(content: Any, rule: MediaRule = "openai", unseen: bool = True) -> int:
    """The media tokens of a message's ``content`` (0 for a string). ``unseen=False``: a
    part whose size cannot be read counts 0, not the default — what a refusal may rest on
    (a context window, a tokens-per-minute limit), where a guess must not refuse a call the
    server might take."""
    if not isinstance(content, list):
        return 0
    return sum(part_tokens(p, rule, unseen) for p in content if isinstance(p, Mapping))


def part_tokens(part: Mapping[str, Any], rule: MediaRule = "openai", unseen: bool = True) -> int:
    """One content part's media tokens (0 for text and anything unknown)."""
    kind = part.get("type")
    if kind in ("image_url", "input_image"):
        return _openai_image(part, rule, unseen)
    if kind == "image":  # Anthropic's
        return _anthropic_image(part.get("source"), unseen)
    if kind == "input_audio":
        return _audio(part.get("input_audio") or part, unseen)
    if kind in ("file", "input_file"):
        spec = part.get("file", part)
        data = spec.get("file_data") if isinstance(spec, Mapping) else None
        payload = _payload(data) if isinstance(data, str) else None
        return _pdf(payload, _image_max(rule), unseen)
    if kind == "document":  # Anthropic's
        return _document(part.get("source"), unseen)
    if kind == "tool_result":  # Anthropic's: may carry images
        return content_media_tokens(part.get("content"), "anthropic", unseen)
    return 0


def _payload(data: str, chars: int | None = None) -> str | None:
    """The base64 payload of a data: URL (``data`` itself when it is bare base64), its first
    ``chars`` only when given (a copy of a megabyte image is not free); None for a data: URL
    that is not base64."""
    if not data.startswith("data:"):
        return data if chars is None else data[:chars]
    comma = data.find(",", 0, 512)
    if comma < 0 or not data[:comma].endswith(";base64"):
        return None
    return data[comma + 1 :] if chars is None else data[comma + 1 : comma + 1 + chars]


def _rules(rule: MediaRule) -> frozenset[str | float]:
    return _NAMED[rule] if isinstance(rule, str) else rule


def _image_max(rule: MediaRule) -> int:
    """The dearest image of the rule (a PDF page's image)."""
    return max(_image_tokens(r, None, False, True) for r in _rules(rule))


def _image_tokens(rule: str | float, size: tuple[int, int] | None, low: bool,
                  unseen: bool) -> int:
    """One formula's tokens for an image of ``size`` (None: unreadable)."""
    if rule == "tiles":  # a low-detail image costs 85 whatever its size
        if size is not None:
            return openai_image_tokens(*size, "low" if low else "high")
        return OPENAI_IMAGE_LOW if low else OPENAI_IMAGE_MAX if unseen else 0
    if rule == "anthropic":
        if size is not None:
            return anthropic_image_tokens(*size)
        return ANTHROPIC_IMAGE_MAX if unseen else 0
    assert isinstance(rule, float)
    if size is not None:
        return openai_patch_tokens(*size, rule)
    return _ceil(_PATCH_CAP * rule) if unseen else 0


def _openai_image(part: Mapping[str, Any], rule: MediaRule, unseen: bool) -> int:
    spec = part.get("image_url")
    url = spec.get("url") if isinstance(spec, Mapping) else spec
    detail = spec.get("detail") if isinstance(spec, Mapping) else None
    detail = detail or part.get("detail") or "auto"
    is_data = isinstance(url, str) and url.startswith("data:")
    payload = _payload(url, HEAD_CHARS + 64) if isinstance(url, str) and is_data else None
    size = _image_size(payload) if payload else None
    low = detail == "low"
    return max(_image_tokens(r, size, low, unseen) for r in _rules(rule))


def _image_size(payload: str) -> tuple[int, int] | None:
    """Its first kilobytes hold the size of a PNG, GIF or WebP; a JPEG's frame header may
    follow tens of kilobytes of EXIF, so only a JPEG is decoded further."""
    head = b64_head(payload, 1024)
    size = image_size(head)
    for chars in (32 * 1024, HEAD_CHARS):  # decoding costs ~5 ms a megabyte: by steps
        if size is not None or not head.startswith(b"\xff\xd8") or len(payload) <= len(head):
            break
        head = b64_head(payload, chars)
        size = image_size(head)
    return size


def _anthropic_image(source: Any, unseen: bool) -> int:
    if isinstance(source, Mapping) and source.get("type") == "base64":
        data = source.get("data")
        size = _image_size(data) if isinstance(data, str) else None
        if size is not None:
            return anthropic_image_tokens(*size)
    return ANTHROPIC_IMAGE_MAX if unseen else 0


def _audio(spec: Any, unseen: bool) -> int:
    data = spec.get("data") if isinstance(spec, Mapping) else None
    if not isinstance(data, str) or not data:
        return 0
    size = b64_bytes(data)
    head = b64_head(data, 4096)
    seconds = wav_seconds(head, size) or mp3_seconds(head, size)
    if seconds is None:
        seconds = size / _AUDIO_FALLBACK_BYTES_PER_S if unseen else 0.0
    return math.ceil(seconds * AUDIO_TOKENS_PER_S)


def _document(source: Any, unseen: bool) -> int:
    if not isinstance(source, Mapping):
        return _pdf(None, ANTHROPIC_IMAGE_MAX, unseen)
    kind = source.get("type")
    if kind == "text":
        data = source.get("data")
        # ~4 characters a token, as gptgate/tokens.py (which imports this module)
        return (len(data) + 3) // 4 if isinstance(data, str) else 0
    if kind == "content":  # text blocks and images
        content = source.get("content")
        if isinstance(content, str):
            return (len(content) + 3) // 4
        blocks = content if isinstance(content, list) else []
        chars = sum(len(b["text"]) for b in blocks if isinstance(b, Mapping)
                    and isinstance(b.get("text"), str))
        return (chars + 3) // 4 + content_media_tokens(blocks, "anthropic", unseen)
    data = source.get("data") if kind == "base64" else None
    return _pdf(data if isinstance(data, str) else None, ANTHROPIC_IMAGE_MAX, unseen)


def _pdf(payload: str | None, image_max: int, unseen: bool) -> int:
    """A PDF's tokens: per page its text and its image (see the module docstring)."""
    per_page = PDF_TEXT_TOKENS_PER_PAGE + image_max
    if not payload:
        return PDF_UNSEEN_PAGES * per_page if unseen else 0
    head = b64_head(payload, _PDF_END_CHARS)
    start = max(0, len(payload) - _PDF_END_CHARS) // 4 * 4  # a whole base64 quantum
    tail = b64_head(payload[start:], _PDF_END_CHARS) if start else b""
    pages = pdf_pages(head + b"\n" + tail)
    if pages is None and not unseen:
        return 0
    if pages is None:
        guessed = math.ceil(b64_bytes(payload) / _PDF_BYTES_PER_PAGE)
        pages = min(max(1, guessed), _PDF_MAX_GUESSED_PAGES)
    return pages * per_page
