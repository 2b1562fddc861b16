"""Which backends of a fleet cannot take the media a call carries, so the router sends it to
one that can.

Why: routing judged a call by its text. ``tier="auto"`` sent "what is this?" with a photo
wherever its classifier pointed — a custom classifier's "small", or the small tier when the
large one was down — and a text-only small model (``gpt-3.5-turbo``, a self-hosted
``qwen2.5-1.5b`` declared ``media=()``) answers an image part with a 400. Now such a backend
is left out of the call's choices the way one that refuses its parameters is
(gptgate/param_fit.py) or one whose context window it does not fit (``routing._fits``): the
tier preference then moves the call to the tier that takes it.

What a backend takes: ``Backend(media=...)`` when given (``()``: text only), else what its
model's family is known to take (:data:`KNOWN_MEDIA`, by name), else unknown — taken as
anything, and the server decides. When no backend is known to take the media, none is left
out: the server's own answer (a 400 naming the part), not a gateway guess.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:
    from .config import Backend
    from .routing import BackendState

__all__ = ["KNOWN_MEDIA", "MediaKind", "call_media", "model_media", "refused_media"]

MediaKind: TypeAlias = Literal["image", "audio", "file"]

#: content part types (OpenAI chat and Responses, Anthropic) and the media kind each carries
_PART_KINDS: Mapping[str, MediaKind] = {
    "image_url": "image", "input_image": "image", "image": "image",
    "input_audio": "audio",
    "file": "file", "input_file": "file", "document": "file",
}
#: part types that are text: the rest is media (an unknown type counts as its own kind)
_TEXT_PARTS = frozenset({"text", "input_text", "output_text", "refusal"})

_IMAGE_FILE: frozenset[str] = frozenset({"image", "file"})
#: model families' media by name, first match wins (``fnmatch`` globs, lower case); a model
#: matching none is unknown. Text-only entries come first: ``o3-mini`` is not ``o3``.
KNOWN_MEDIA: tuple[tuple[tuple[str, ...], frozenset[str] | None], ...] = (
    (("gpt-3.5*", "o1-mini*", "o3-mini*", "deepseek-chat*", "deepseek-reasoner*"),
     frozenset()),
    (("*audio*", "*realtime*", "*search*"), None),  # special-purpose variants: unknown
    (("gpt-4o*", "chatgpt-4o*", "gpt-4.1*", "gpt-4.5*", "gpt-4-turbo*", "gpt-5*", "o1", "o1-2*",
      "o3", "o3-2*", "o3-pro*", "o4-mini*"), _IMAGE_FILE),
    (("claude-*",), _IMAGE_FILE),
    (("gemini-1.5*", "gemini-2*", "gemini-3*"), frozenset({"image", "audio", "file"})),
)


def call_media(messages: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """The media kinds a call's messages carry (empty for text): ``image``, ``audio``,
    ``file`` (a PDF or other document), or an unknown part's own type."""
    kinds: set[str] = set()
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if isinstance(part, Mapping):
                kind = part.get("type")
                if isinstance(kind, str) and kind not in _TEXT_PARTS:
                    kinds.add(_PART_KINDS.get(kind, kind))
    return frozenset(kinds)


def model_media(backend: Backend, model: object = None) -> frozenset[str] | None:
    """What ``backend`` takes beyond text: its declared ``media``, else its model's family's
    (``model``: the call's own ``model=``, sent instead of the backend's), else None."""
    if backend.media is not None:
        return frozenset(backend.media)
    name = model if isinstance(model, str) and model else backend.model
    return _by_name(name)


@lru_cache(maxsize=1024)
def _by_name(model: str) -> frozenset[str] | None:
    name = model.rsplit("/", 1)[-1].lower()  # OpenRouter's "openai/gpt-4o"
    for patterns, media in KNOWN_MEDIA:
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            return media
    return None


def refused_media(
    states: Collection[BackendState],
    messages: Sequence[Mapping[str, Any]],
    model: object = None,
) -> frozenset[str]:
    """The names of the backends known not to take the call's media; empty for a text call,
    and when every backend would be left out (or there is no other to go to)."""
    if len(states) < 2:
        return frozenset()
    kinds = call_media(messages)
    if not kinds:
        return frozenset()
    refused = []
    for state in states:
        takes = model_media(state.backend, model)
        if takes is not None and not kinds <= takes:
            refused.append(state.name)
    return frozenset(refused) if len(refused) < len(states) else frozenset()
