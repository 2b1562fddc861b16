"""Anthropic's ``thinking=`` on the OpenAI dialect: sent, left out or refused, by what the
backend's model would do with it.

A call written for Claude (``thinking={"type": "enabled", "budget_tokens": N}``) meets an
OpenAI-dialect backend in a mixed fleet — a failover, ``tier="auto"``, ``backend=``. OpenAI and
Azure answer the field with a 400 ("Unrecognized request argument supplied: thinking"), so do
Gemini, Groq and Mistral; a self-hosted server drops it without a word. Passing it through made
the failover answer with that 400. What the caller meant decides instead:

* ``{"type": "disabled"}`` (or None): no thinking — what a model that does not think does
  anyway, and an o-series model cannot be told: left out;
* enabled, on a model that reasons on its own (an OpenAI reasoning model,
  ``ModelRule.thinks``): it thinks without being asked — left out (``reasoning_effort=``, the
  OpenAI knob, is the caller's to give);
* enabled, on any other model: refused like a parameter the provider rejects. In a mixed
  fleet the router then leaves the backend out (gptgate/param_fit.py), as it does one that
  refuses ``response_format``: the call is not answered by a model that cannot do what it
  asked; pinned there, or with no other backend, it raises ``BadRequestError``, nothing sent;
* a provider whose OpenAI format has ``thinking`` itself (DeepSeek's thinking-mode switch,
  ``Provider.takes_thinking``) gets it as it is — and, enabled, the call is checked against
  the provider's reasoning family's rules (thinking mode ignores the sampling parameters on
  any DeepSeek model, as ``deepseek-reasoner`` does).

``extra_body={"thinking": ...}`` still sends it as it is, unchecked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from gptgate.errors import BadRequestError

__all__ = ["PARAM", "asks_to_think", "thinking_fate"]

#: the parameter (Anthropic's Messages API name)
PARAM = "thinking"


def asks_to_think(value: Any) -> bool:
    """``thinking=value`` asks the model to think (anything but None or type disabled)."""
    if value is None:
        return False
    return not (isinstance(value, Mapping) and value.get("type") == "disabled")


def thinking_fate(
    value: Any, *, takes: bool, thinks: bool, provider: str, model: str, backend: str
) -> Literal["send", "drop"]:
    """Whether ``thinking=value`` is sent or left out of the body; raises
    :class:`BadRequestError` (nothing sent) when the model cannot do what it asks."""
    if takes:
        return "send"
    if not asks_to_think(value) or thinks:
        return "drop"
    raise BadRequestError(
        f"bad request: provider {provider!r} takes no parameter 'thinking' (Anthropic's "
        f"extended thinking) and model {model!r} does not reason on its own; nothing was sent "
        "(to send it anyway: extra_body={'thinking': ...})",
        backend=backend,
    )
