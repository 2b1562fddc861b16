"""Parameters one generation of Claude refuses, checked before sending.

The Messages API takes the same fields for every model, but not every model takes every
value (Anthropic's migration guide):

* **Claude Opus 4.7 and later** (Opus 4.8, 5; Sonnet 5, …): "setting ``temperature``,
  ``top_p``, or ``top_k`` to any non-default value will return a 400 error" ("`temperature`
  is deprecated for this model"), and so does ``thinking={"type": "enabled",
  "budget_tokens": N}``: thinking is ``{"type": "adaptive"}``, its depth
  ``output_config={"effort": ...}``.
* **Claude 4.5 and 4.6** (Sonnet, Haiku, Opus): ``temperature`` or ``top_p``, "not both".

A model is placed by the version in its id (``claude-opus-4-7``, ``claude-sonnet-4-5-20250929``,
``claude-haiku-4-5@20251001``); the Claude 3 ids (``claude-3-7-sonnet-…``) and 4.0–4.1 take
every sampling parameter. Refused as OpenAI's reasoning models' are (gptgate/model_rules.py):
naming the parameter and the model, nothing sent, and in a mixed fleet the call goes to a
backend that takes it; ``extra_body=`` still sends anything as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from gptgate.errors import BadRequestError

__all__ = ["check_claude_model", "claude_version"]

#: ``claude-<family>-<major>[-<minor>]``; a date suffix (8 digits) is no minor version
_VERSION = re.compile(r"claude-[a-z]+-(\d+)(?:-(\d{1,2}))?(?![0-9])")
#: from this version on, the sampling parameters and thinking budgets are a 400
_NO_SAMPLING = (4, 7)
#: from this version on (up to the one above), temperature and top_p not both
_ONE_SAMPLER = (4, 5)
_SAMPLING = ("temperature", "top_p", "top_k")
#: the parameters' defaults, which every model takes
_DEFAULTS: Mapping[str, Any] = {"temperature": 1, "top_p": 1}


@lru_cache(maxsize=64)
def claude_version(model: str) -> tuple[int, int] | None:
    """(major, minor) of a Claude model id, or None for an id of another shape."""
    found = _VERSION.search(model.lower())
    if found is None:
        return None
    return int(found.group(1)), int(found.group(2) or 0)


def _refuse(param: str, model: str, why: str, backend: str | None) -> BadRequestError:
    return BadRequestError(
        f"bad request: provider 'anthropic' {why} the parameter {param!r} for model "
        f"{model!r}; nothing was sent", backend=backend,
    )


def check_claude_model(model: str, params: Mapping[str, Any], backend: str | None) -> None:
    """Raise :class:`BadRequestError` for a parameter ``model`` answers with a 400."""
    version = claude_version(model)
    if version is None or version < _ONE_SAMPLER:
        return
    if version >= _NO_SAMPLING:
        for param in _SAMPLING:
            if param in params and params[param] is not None:
                if param in _DEFAULTS and params[param] == _DEFAULTS[param]:
                    continue
                raise _refuse(param, model, "rejects (since Claude Opus 4.7)", backend)
        thinking = params.get("thinking")
        if isinstance(thinking, Mapping) and thinking.get("type") == "enabled":
            raise _refuse(
                "thinking", model, "rejects a thinking budget (send thinking={'type': "
                "'adaptive'} and output_config={'effort': ...}) in", backend,
            )
        return
    if params.get("temperature") is not None and params.get("top_p") is not None:
        raise BadRequestError(
            f"bad request: provider 'anthropic' refuses 'temperature' and 'top_p' together "
            f"for model {model!r} (send one); nothing was sent", backend=backend,
        )
