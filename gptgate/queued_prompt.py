"""Whether an attempt left before any of its answer came may have had its prompt billed.

A server bills a request's prompt once it has prefilled it, nothing while it only queued
(vLLM, llama.cpp, the simulator). The client cannot see which: its guess used to be "left
before the backend's *median* time to first token: still queued, book no prompt". A server
whose queue was long a while ago teaches a long median, and a call sent later to the quiet
server is prefilled in a fraction of that: cancelled then, it was billed its prompt and booked
nothing (one chaos run: the cpu ledger 6.26% under the bill; tests/test_queued_prompt.py: the
prompts booked 9.7% under the bill's on ``gate.chat``, 15.7% on the SDK). Now only an attempt
left before the backend's *fastest* recent first token — which no request of it has beaten,
so no prefill can have ended — books no prompt; any other books it as possibly billed (the
ledger's ``uncertain_tokens``: the bill lies between what the ledger is sure of and its total).
"""

from __future__ import annotations

from .routing import LatencyWindow

__all__ = ["may_be_prefilled"]


def may_be_prefilled(first_tokens: LatencyWindow, elapsed_s: float) -> bool:
    """May a request sent ``elapsed_s`` ago have been prefilled (so its prompt billed)? Yes
    unless it is younger than every recent first token (``first_tokens``: the backend's
    times to first token); yes before the backend has shown one."""
    fastest = first_tokens.percentile(0.0)
    return fastest is None or elapsed_s >= fastest
