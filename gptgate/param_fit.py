"""Which backends of a mixed fleet refuse a call's parameters, so the router sends it to one
that takes them.

Each provider's dialect refuses, before sending, what its API would answer with a 400 or
silently ignore (``response_format`` on Anthropic, ``frequency_penalty`` on Gemini, the
sampling parameters of a reasoning model). In a fleet of one provider that is the call's
answer. Beside a backend that takes the parameters — an Azure deployment failing over to
Anthropic, a self-hosted small tier under a hosted large one — it is only that backend's: the
router leaves it out of the call's choices the way it leaves out a context window the call
does not fit (``routing._fits``). When every backend refuses, none is left out, and the
attempt raises the dialect's ``BadRequestError`` (nothing sent), as in a fleet of one.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from .errors import BadRequestError

if TYPE_CHECKING:
    from .routing import BackendState

__all__ = ["refused_by"]


def refused_by(states: Collection[BackendState], params: Mapping[str, Any]) -> frozenset[str]:
    """The names of the backends whose dialect refuses ``params``; empty when all do (or
    none, or there is no other backend to go to)."""
    if len(states) < 2 or not params:
        return frozenset()
    refused = []
    for state in states:
        try:
            state.pool.dialect.check_call(state.backend.model, params)
        except BadRequestError:
            refused.append(state.name)
    return frozenset(refused) if len(refused) < len(states) else frozenset()
