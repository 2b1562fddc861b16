"""``n``, the choices one chat request asks for: each may be ``max_tokens`` long, so a call's
output bound — the dollar budget's hold, the rate-limit reservation — is ``n × max_tokens``
(OpenAI counts it so at admission). Holding one choice's let ``n=4`` spend four times what
the budget held. A wrong ``n`` is refused before sending, as a wrong ``max_tokens`` is:
``True`` would go out as ``true`` (a 400 billed nothing, but a retry loop's worth of them),
``"2"`` is misread by some servers, and the bound must be an int to be multiplied."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gptgate.errors import BadRequestError

__all__ = ["check_choice_count", "choice_count"]


def check_choice_count(params: Mapping[str, Any]) -> None:
    """Raise :class:`BadRequestError` unless ``n`` is absent, None or an int >= 1."""
    value = params.get("n")
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequestError(f"n must be an int >= 1 (or None), got {value!r}")


def choice_count(params: Mapping[str, Any]) -> int:
    """The choices a call asks for (1 unless ``n`` says more)."""
    value = params.get("n")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else 1
