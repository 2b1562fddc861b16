"""A request's true difficulty, and how a small model fails the hard ones.

Tiered serving (docs/tiers.md) is only testable if the simulator knows which requests a small
model gets wrong. The workload marks each request with the ``x-sim-difficulty`` header
(``hard`` or ``simple``; unmarked is simple): the gateway's classifier sees the messages and
parameters but never the header, so the label is ground truth the routing cannot peek at.

A profile with ``hard_failure_rate > 0`` (a small model) fails that share of the hard requests,
in one of four ways chosen by the request's own seeded draw (deterministic per engine seed and
request body):

* ``invalid_json`` — the JSON asked for with ``response_format`` is cut short;
* ``ramble`` — it runs on to ``max_tokens`` (``finish_reason="length"``); without
  ``max_tokens`` it is just long, and looks fine;
* ``empty`` — an empty answer (``finish_reason="stop"``);
* ``silent`` — a normal-looking answer that is wrong: nothing on the wire tells.

Without ``response_format``, the draw picks ``ramble`` 45 %, ``empty`` 45 %, ``silent`` 10 %.
A request that asks for JSON (``json_object`` or ``json_schema``) gets a valid JSON object
from every model unless it failed that way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from gptgate.sim.text import output_text
from gptgate.tokens import CHARS_PER_TOKEN

__all__ = [
    "DIFFICULTY_HEADER",
    "FailureMode",
    "answer_text",
    "failure_mode",
    "is_hard",
    "wants_json",
]

DIFFICULTY_HEADER = "x-sim-difficulty"

FailureMode = Literal["invalid_json", "ramble", "empty", "silent"]

_JSON_HEAD = '{"answer": "'
_JSON_TAIL = '"}'


def is_hard(headers: Mapping[str, str]) -> bool:
    """Whether the workload marked the request hard (any other value is simple)."""
    return headers.get(DIFFICULTY_HEADER, "").strip().lower() == "hard"


def wants_json(body: Mapping[str, Any]) -> bool:
    """``response_format`` asks for a JSON object (``json_object`` or ``json_schema``)."""
    fmt = body.get("response_format")
    return isinstance(fmt, Mapping) and fmt.get("type") in ("json_object", "json_schema")


def failure_mode(
    hard: bool, rate: float, json_mode: bool, unit: float
) -> FailureMode | None:
    """How this request fails on a model that fails ``rate`` of hard ones (None: it does
    not). ``unit`` is the request's own uniform draw in (0, 1)."""
    if not hard or rate <= 0 or unit >= rate:
        return None
    if json_mode:
        return "invalid_json"
    share = unit / rate  # uniform in (0, 1) again, given the failure
    if share < 0.45:
        return "ramble"
    if share < 0.9:
        return "empty"
    return "silent"


def answer_text(key: int, tokens: int, json_mode: bool, mode: FailureMode | None) -> str:
    """``tokens`` tokens (``4·tokens`` characters) of answer: pseudo-text, or a JSON object of
    it when JSON was asked for (cut short, hence invalid, for ``invalid_json``)."""
    text = output_text(key, tokens)
    if not json_mode:
        return text
    size = tokens * CHARS_PER_TOKEN
    if mode == "invalid_json":
        return (_JSON_HEAD + text)[:size] if size else ""
    room = size - len(_JSON_HEAD) - len(_JSON_TAIL)
    if room < 0:
        return "{}".ljust(size) if size >= 2 else "{}"
    # the corpus is letters, spaces and punctuation: safe inside a JSON string as it is
    return _JSON_HEAD + text[:room] + _JSON_TAIL
