"""An account out of funds, in each provider's words.

The account behind a key can run out of money or quota, and no provider says it with one
status: DeepSeek answers 402 "Insufficient Balance", as do OpenRouter and Mistral; Anthropic
documents a 402 ``billing_error`` but answers a spent balance with a 400
``invalid_request_error`` ("Your credit balance is too low to access the Anthropic API");
OpenAI answers a 429 whose code is ``insufficient_quota`` (or ``billing_not_active``).
Read as their statuses say, the first two were a malformed call (never moved, never counted
against the backend: every call failed while a healthy fallback idled) and the third a rate
limit (retried on the dead account, pausing it as if it were busy).

Only the codes and Anthropic's one sentence are read, not "quota" in general: Gemini's
per-minute 429 also says "You exceeded your current quota", and that one clears by waiting.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OUT_OF_FUNDS_HINT", "out_of_funds"]

#: codes or types that name the account's funds, whatever the status
_CODES = frozenset({"insufficient_quota", "billing_error", "billing_not_active"})
#: Anthropic's spent balance, sent as a 400 invalid_request_error
_PHRASES = ("credit balance is too low",)

#: what the error adds to the server's message: what to do about it
OUT_OF_FUNDS_HINT = (
    "the account behind this backend's key is out of funds or quota: top it up (calls go to "
    "other eligible backends meanwhile)"
)


def out_of_funds(status: int, text: str, code: Any, kind: Any) -> bool:
    """Does this error response say the account has no funds or quota left?"""
    if status == 402:
        return True
    tags = {t.lower() for t in (code, kind) if isinstance(t, str)}
    if tags & _CODES:
        return True
    if status not in (400, 403):
        return False
    lowered = text.lower()
    return any(phrase in lowered for phrase in _PHRASES)
