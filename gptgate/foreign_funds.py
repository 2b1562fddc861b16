"""An SDK's or httpx's status error that says the account is out of funds.

A guarded function's own client (not ``gate.http_client``) raises the SDK's exception, and
the guard classified it by its status alone (guard.py ``classify_exception``): OpenAI's 429
``insufficient_quota`` was a rate limit — retried on the empty account and pausing it — and
Anthropic's 400 "credit balance is too low" a malformed call. The SDK has read the error
body already (openai's and anthropic's ``APIStatusError.response``, ``.body``); it is read
here as ``gate.chat`` reads it (gptgate/wire/out_of_funds.py).
"""

from __future__ import annotations

import json
from contextlib import suppress
from typing import Any

__all__ = ["out_of_funds_error"]

#: statuses an empty account is said with (out_of_funds.py)
_STATUSES = frozenset({400, 402, 403, 429})


def _said(exc: BaseException) -> bytes | None:
    """The error body the exception carries, read already (None: none, or unread)."""
    response = getattr(exc, "response", None)
    with suppress(Exception):  # an unread httpx body raises; a made-up response has none
        content = getattr(response, "content", None)
        if isinstance(content, bytes) and content:
            return content
    body: Any = getattr(exc, "body", None)  # openai / anthropic: the parsed JSON
    if isinstance(body, (dict, list)):
        with suppress(TypeError, ValueError):
            return json.dumps(body).encode()
    return None


def out_of_funds_error(exc: BaseException, status: int) -> bool:
    """Does ``exc`` (a status error with ``status``) say the account has no funds left?"""
    if status not in _STATUSES:
        return False
    from .wire.openai import _body_message
    from .wire.out_of_funds import out_of_funds

    said = _said(exc)
    if said is None:
        return status == 402
    text, code, kind = _body_message(said)
    return out_of_funds(status, text, code, kind)
