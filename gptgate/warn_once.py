"""Warnings said once per live backend, not once per object that meets the condition.

An SDK client built per request (a Flask or FastAPI handler's ``openai.OpenAI(http_client=
gate.http_client(...))``) is a new ``GuardTransport`` each time: a flag on the transport said
"the SDK retries on its own" once per request — 50 requests against a failing backend, 50
identical WARNING lines; at 10,000 a minute, a log flood in the incident it should help
with. The flag lives on the backend's live state instead (a re-opened gateway builds it
afresh, and says it once more).
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from .routing import BackendState

__all__ = ["warn_once"]

_said: weakref.WeakKeyDictionary[BackendState, set[str]] = weakref.WeakKeyDictionary()


def warn_once(
    log: logging.Logger, state: BackendState, key: str, message: str, *args: Any
) -> bool:
    """Log ``message`` at WARNING the first time ``key`` is met for ``state``; True if it
    was logged now."""
    said = _said.setdefault(state, set())
    if key in said:
        return False
    said.add(key)
    log.warning(message, *args)
    return True
