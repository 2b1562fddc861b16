"""Parsing and validating a chat-completion request, with each server's error dialect.

Validation happens before any rate-limit charge or queueing, as on OpenAI: a malformed request
costs nothing and never occupies a slot.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gptgate.sim.difficulty import wants_json
from gptgate.sim.profiles import SimProfile
from gptgate.sim.tokenizer import sim_prompt_tokens

if TYPE_CHECKING:
    from gptgate.sim.tools import ToolCall

__all__ = ["BadRequest", "ChatRequest", "parse_chat"]


class BadRequest(Exception):
    """A request the server refuses before any work; carries the error body's fields."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type_: str = "invalid_request_error",
        status: int = 400,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.type_ = type_
        self.status = status


@dataclass(slots=True)
class ChatRequest:
    """A validated chat-completion request."""

    messages: list[dict[str, Any]]
    stream: bool
    include_usage: bool
    max_tokens: int | None
    prompt_tokens: int
    cache_key: str | None
    #: ``response_format`` asks for a JSON object
    json_mode: bool = False
    #: the tool call this request is answered with (gptgate/sim/tools.py), if any
    tool_call: ToolCall | None = None


def parse_chat(body: bytes, p: SimProfile) -> ChatRequest:
    """Validate a chat-completion body the way the profile's server would (OpenAI errors,
    or llama-server's: a 500 for malformed JSON, ``exceed_context_size_error``)."""
    try:
        data = json.loads(body)
    except ValueError:
        if p.flavor == "llamacpp":
            raise BadRequest(
                "Failed to parse JSON body", type_="server_error", status=500
            ) from None
        raise BadRequest(
            "We could not parse the JSON body of your request. (HINT: This likely means "
            "you aren't using your HTTP library correctly.)"
        ) from None
    if not isinstance(data, dict):
        raise BadRequest("The request body must be a JSON object.")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest(
            "Invalid 'messages': expected a non-empty array.",
            param="messages",
            code="invalid_value",
        )
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest(
                f"Invalid 'messages[{i}]': expected an object with a 'role'.",
                param=f"messages[{i}]",
                code="invalid_value",
            )
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(
            "Invalid 'stream': expected a boolean.", param="stream", code="invalid_type"
        )
    max_tokens = data.get("max_completion_tokens")
    param = "max_completion_tokens"
    if max_tokens is None:
        max_tokens, param = data.get("max_tokens"), "max_tokens"
    if max_tokens is not None and (
        not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
    ):
        raise BadRequest(
            f"Invalid '{param}': expected an integer >= 1.", param=param, code="invalid_value"
        )
    options = data.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    prompt_tokens = sim_prompt_tokens(messages)
    requested = prompt_tokens + (max_tokens or 0)
    too_long = p.flavor != "llamacpp" and requested > p.context_tokens
    if prompt_tokens >= p.context_tokens or too_long:
        if p.flavor == "llamacpp":
            raise BadRequest(
                "the request exceeds the available context size, try increasing it",
                type_="exceed_context_size_error",
            )
        raise BadRequest(
            f"This model's maximum context length is {p.context_tokens} tokens. However, "
            f"you requested {requested} tokens ({prompt_tokens} in the messages, "
            f"{max_tokens or 0} in the completion). Please reduce the length of the "
            "messages or completion.",
            param="messages",
            code="context_length_exceeded",
        )
    cache_key = data.get("prompt_cache_key")
    from gptgate.sim.tools import pick_tool_call  # tools.py raises this module's BadRequest

    return ChatRequest(
        messages=messages,
        stream=stream,
        include_usage=include_usage,
        max_tokens=max_tokens,
        prompt_tokens=prompt_tokens,
        cache_key=cache_key if isinstance(cache_key, str) else None,
        json_mode=wants_json(data),
        tool_call=pick_tool_call(data) if "tools" in data else None,
    )
