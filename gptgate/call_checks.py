"""The checks a chat call's arguments pass before anything is queued or sent — shared by
``gate.chat`` / ``stream`` / ``map`` and ``gate.batch`` items, which are the same requests sent
another way: a batch item that skipped them was uploaded, and answered with a 400 for every
item hours later, once the batch had run (or with a cap the server ignored)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .choice_count import check_choice_count
from .errors import BadRequestError
from .own_options import refuse_own_options
from .param_types import check_param_types
from .responses_params import refuse_responses_params

__all__ = ["ROLES", "check_params", "is_int", "validate_messages"]

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_messages(messages: object) -> Sequence[Mapping[str, Any]]:
    """Catch a malformed call before anything is sent (and before it costs anything).

    Refused: ``messages`` not a non-empty list (or tuple) of mappings; a role that is not one
    of ``ROLES``; no content (unless tool or function calls stand in for it); content that is
    neither a string nor a non-empty list of parts, each a mapping with a string ``type`` (a
    ``"text"`` part with a string ``text``). Everything else in a message — names, tool calls,
    the contents of image or audio parts, keys gptgate does not know — passes untouched, for
    the server to judge. What only encoding can tell (a lone surrogate, a NaN, an object json
    does not know) is refused by ``build_chat_body`` just before the send, at no extra cost.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise BadRequestError("messages must be a list of {'role': ..., 'content': ...} objects")
    if not messages:
        raise BadRequestError("messages must not be empty")
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise BadRequestError(f"messages[{index}] must be an object with role and content")
        role = message.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise BadRequestError(f"messages[{index}].role must be one of {sorted(ROLES)}")
        content = message.get("content")
        if content is None:
            if not (message.get("tool_calls") or message.get("function_call")):
                raise BadRequestError(f"messages[{index}] has no content")
        elif not isinstance(content, str):
            if not isinstance(content, list):
                raise BadRequestError(
                    f"messages[{index}].content must be a string or a list of parts"
                )
            _parts(index, content)
    return messages


def _parts(index: int, parts: list[Any]) -> None:
    if not parts:
        raise BadRequestError(f"messages[{index}].content must not be an empty list of parts")
    for number, part in enumerate(parts):
        where = f"messages[{index}].content[{number}]"
        if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
            raise BadRequestError(f"{where} must be an object with a string 'type'")
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            raise BadRequestError(f"{where} is a text part without a string 'text'")


_TOKEN_PARAMS = ("max_tokens", "max_completion_tokens")


def check_params(params: Mapping[str, Any]) -> None:
    """The OpenAI parameters gptgate itself reads: a token bound sizes the rate-limit
    reservation, the attempt timeout and the stream rule, so a wrong one is refused rather
    than misread (``True`` as 1, ``"300"`` or ``0`` as "no bound"). ``None`` is the server's
    default. The standard parameters' JSON types are checked too (``temperature="hot"``:
    gptgate/param_types.py); every other parameter passes through untouched."""
    refuse_own_options(params)  # concurrency= on a call would be sent, and ignored
    refuse_responses_params(params)  # max_output_tokens= too (gptgate/responses_params.py)
    check_choice_count(params)  # n sizes the output bound (gptgate/choice_count.py)
    for name in _TOKEN_PARAMS:
        value = params.get(name)
        if value is not None and not (is_int(value) and value >= 1):
            raise BadRequestError(f"{name} must be an int >= 1 (or None), got {value!r}")
    check_param_types(params)
