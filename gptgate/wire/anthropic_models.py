"""Parameters one generation of Claude refuses, checked before sending.

The Messages API takes the same fields for every model, but not every model takes every
value (Anthropic's migration guides and its adaptive-thinking page):

* **Sampling.** Claude Opus 4.7 and later (Opus 4.8, 5; Sonnet 5, Haiku 5.5, …): "setting
  ``temperature``, ``top_p``, or ``top_k`` to any non-default value will return a 400 error";
  Claude 4.5 and 4.6 (Sonnet, Haiku, Opus): ``temperature`` or ``top_p``, "not both".
* **Thinking** — three modes, ``{"type": "enabled", "budget_tokens": N}`` (manual),
  ``{"type": "adaptive"}`` (its depth ``output_config={"effort": ...}``) and
  ``{"type": "disabled"}``, taken by generation (:func:`thinking_modes`):

  - up to Claude 4.5 (Sonnet 4.5, Opus 4.5, Haiku 4.5, "the last of the pre-adaptive
    models"; 4.1, 4.0, 3.7): manual only — ``adaptive`` is a 400;
  - Claude Opus 4.6 and Sonnet 4.6: both (manual deprecated);
  - Claude Opus 4.7 and later (Opus 4.8, 5; Sonnet 5, 5.5; Haiku 5.5): adaptive only —
    a thinking budget is a 400;
  - "always on" — Claude Mythos (Preview, 5), Claude Fable (5, 5.1) and Claude Opus 5.5 and
    later: adaptive only, and ``disabled`` is a 400 too.

A model is placed by the version in its id (``claude-opus-4-7``, ``claude-sonnet-4-5-20250929``,
``claude-haiku-4-5@20251001``, ``claude-3-7-sonnet-20250219``) and by its family
(``claude-mythos-preview``); an id of no known shape is sent as it is. Refused as OpenAI's
reasoning models' are (gptgate/model_rules.py): naming the parameter and the model, nothing
sent, and in a mixed fleet the call goes to a backend that takes it; ``extra_body=`` still
sends anything as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Literal

from gptgate.errors import BadRequestError

__all__ = ["ThinkingModes", "check_claude_model", "claude_version", "thinking_modes"]

#: ``claude-<family>-<major>[-<minor>]``; a date suffix (8 digits) is no minor version
_VERSION = re.compile(r"claude-[a-z]+-(\d+)(?:-(\d{1,2}))?(?![0-9])")
#: the Claude 3 ids put the version first: ``claude-3-7-sonnet-…``, ``claude-3-haiku-…``
_VERSION_FIRST = re.compile(r"claude-(\d)(?:-(\d))?-[a-z]")
#: the family word: ``opus``, ``sonnet``, ``haiku``, ``mythos``, ``fable``
_FAMILY = re.compile(r"claude-(?:\d(?:-\d)?-)?([a-z]+)")
#: from this version on, the sampling parameters and thinking budgets are a 400
_NO_SAMPLING = (4, 7)
#: from this version on (up to the one above), temperature and top_p not both
_ONE_SAMPLER = (4, 5)
#: the first version that takes adaptive thinking (Opus 4.6, Sonnet 4.6)
_ADAPTIVE = (4, 6)
#: the families whose thinking is always on, whatever their version
_ALWAYS_ON_FAMILIES = ("mythos", "fable")
#: Claude Opus from this version on thinks always (Opus 5.5's migration guide)
_OPUS_ALWAYS_ON = (5, 5)
_SAMPLING = ("temperature", "top_p", "top_k")
#: the parameters' defaults, which every model takes
_DEFAULTS: Mapping[str, Any] = {"temperature": 1, "top_p": 1}

#: which ``thinking`` types a model takes (:func:`thinking_modes`)
ThinkingModes = Literal["manual", "both", "adaptive", "always"]


@lru_cache(maxsize=64)
def claude_version(model: str) -> tuple[int, int] | None:
    """(major, minor) of a Claude model id, or None for an id of another shape."""
    name = model.lower()
    found = _VERSION.search(name) or _VERSION_FIRST.search(name)
    if found is None:
        return None
    return int(found.group(1)), int(found.group(2) or 0)


@lru_cache(maxsize=64)
def thinking_modes(model: str) -> ThinkingModes | None:
    """The thinking a model takes: ``"manual"`` (a budget only), ``"both"`` (a budget or
    adaptive), ``"adaptive"`` (adaptive or none), ``"always"`` (adaptive, never disabled);
    None for an id of no known shape."""
    name = model.lower()
    family = _FAMILY.search(name)
    kind = family.group(1) if family is not None else None
    if kind in _ALWAYS_ON_FAMILIES:
        return "always"
    version = claude_version(model)
    if version is None:
        return None
    if version < _ADAPTIVE:
        return "manual"
    if version < _NO_SAMPLING:
        return "both"
    if kind == "opus" and version >= _OPUS_ALWAYS_ON:
        return "always"
    return "adaptive"


def _refuse(param: str, model: str, why: str, backend: str | None) -> BadRequestError:
    return BadRequestError(
        f"bad request: provider 'anthropic' {why} the parameter {param!r} for model "
        f"{model!r}; nothing was sent", backend=backend,
    )


#: why each mode refuses a thinking type, and what to send instead
_THINKING_REFUSED: Mapping[tuple[str, str], str] = {
    ("manual", "adaptive"): "takes no adaptive thinking before Claude Opus/Sonnet 4.6 (send "
    "thinking={'type': 'enabled', 'budget_tokens': N}) in",
    ("adaptive", "enabled"): "rejects a thinking budget (send thinking={'type': 'adaptive'} "
    "and output_config={'effort': ...}) in",
    ("always", "enabled"): "rejects a thinking budget (send thinking={'type': 'adaptive'} "
    "and output_config={'effort': ...}) in",
    ("always", "disabled"): "cannot turn thinking off (it always thinks: leave thinking out "
    "or lower output_config={'effort': ...}) in",
}


def _check_thinking(model: str, params: Mapping[str, Any], backend: str | None) -> None:
    spec = params.get("thinking")
    if not isinstance(spec, Mapping):
        return
    modes = thinking_modes(model)
    why = _THINKING_REFUSED.get((modes or "", str(spec.get("type"))))
    if why is not None:
        raise _refuse("thinking", model, why, backend)


def check_claude_model(model: str, params: Mapping[str, Any], backend: str | None) -> None:
    """Raise :class:`BadRequestError` for a parameter ``model`` answers with a 400."""
    _check_thinking(model, params, backend)
    version = claude_version(model)
    if version is None or version < _ONE_SAMPLER:
        return
    if version >= _NO_SAMPLING:
        for param in _SAMPLING:
            if param in params and params[param] is not None:
                if param in _DEFAULTS and params[param] == _DEFAULTS[param]:
                    continue
                raise _refuse(param, model, "rejects (since Claude Opus 4.7)", backend)
        return
    if params.get("temperature") is not None and params.get("top_p") is not None:
        raise BadRequestError(
            f"bad request: provider 'anthropic' refuses 'temperature' and 'top_p' together "
            f"for model {model!r} (send one); nothing was sent", backend=backend,
        )
