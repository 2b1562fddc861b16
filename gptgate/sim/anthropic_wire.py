"""The Messages API's wire format as the simulator writes it: bodies, SSE events, errors.

A stream is ``message_start`` (usage with the input side), ``content_block_start``, ``ping``,
``content_block_delta``s, ``content_block_stop``, ``message_delta`` (stop reason and output
tokens), ``message_stop``; every event is ``event: <type>`` plus the same ``type`` in its data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gptgate.sim.anthropic_thinking import thinking_block
from gptgate.sim.tools import sample_arguments
from gptgate.sim.wire import ChunkWriter, ResponseMeta, dumps

__all__ = [
    "STOP_REASONS",
    "MessagesWriter",
    "error_body",
    "message_body",
    "tool_input",
    "usage",
]

#: the engine's finish reasons in Anthropic's words
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}

#: error ``type`` by status (Anthropic's documented set; 529 is its overload)
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def error_body(status: int, message: str, request_id: str | None) -> bytes:
    kind = _ERROR_TYPES.get(status, "api_error")
    return dumps(
        {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}
    ).encode()


def usage(uncached: int, write: int, read: int, output: int) -> dict[str, Any]:
    """Anthropic's usage: ``input_tokens`` is only the part after the last cache breakpoint;
    cache writes and reads come *on top of* it."""
    return {
        "input_tokens": uncached,
        "cache_creation_input_tokens": write,
        "cache_read_input_tokens": read,
        "cache_creation": {"ephemeral_5m_input_tokens": write, "ephemeral_1h_input_tokens": 0},
        "output_tokens": output,
        "service_tier": "standard",
    }


def tool_input(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A plausible ``input`` for a tool call: a sample value per required property."""
    return sample_arguments(tool.get("input_schema"))


def _message_id(meta: ResponseMeta) -> str:
    return "msg_" + meta.id.removeprefix("chatcmpl-")


def _tool_block(meta: ResponseMeta, tool: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": "toolu_" + meta.id.removeprefix("chatcmpl-"),
        "name": tool.get("name"),
        "input": tool_input(tool),
    }


def message_body(
    meta: ResponseMeta,
    text: str,
    stop: str,
    usage_obj: dict[str, Any],
    tool: Mapping[str, Any] | None,
    *,
    thinking: bool = False,
) -> bytes:
    content = [_tool_block(meta, tool)] if tool is not None else [{"type": "text", "text": text}]
    if thinking:
        content.insert(0, thinking_block(meta.id))
    return dumps(
        {
            "id": _message_id(meta),
            "type": "message",
            "role": "assistant",
            "model": meta.model,
            "content": content,
            "stop_reason": STOP_REASONS.get(stop, stop),
            "stop_sequence": None,
            "usage": usage_obj,
        }
    ).encode()


def _event(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {dumps({'type': kind, **data})}\n\n"


class MessagesWriter(ChunkWriter):
    """The engine's stream calls (role, content, finish, done) as Messages-API events."""

    __slots__ = ("_index", "_stop_usage", "_thinking", "_tool", "_tool_sent", "_usage")

    def __init__(
        self,
        meta: ResponseMeta,
        usage_obj: dict[str, Any],
        tool: Mapping[str, Any] | None,
        *,
        thinking: bool = False,
    ) -> None:
        super().__init__(meta, include_usage=False)
        self._usage = usage_obj
        self._tool = tool
        self._tool_sent = False
        self._thinking = thinking
        #: the answer's block: after the thinking block when there is one
        self._index = 1 if thinking else 0

    def role(self) -> str:
        m = self._meta
        start_usage = {**self._usage, "output_tokens": 1}
        message: dict[str, Any] = {
            "id": _message_id(m),
            "type": "message",
            "role": "assistant",
            "model": m.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": start_usage,
        }
        block = (
            {**_tool_block(m, self._tool), "input": {}}
            if self._tool is not None
            else {"type": "text", "text": ""}
        )
        return (
            _event("message_start", {"message": message})
            + self._thinking_events()
            + _event("content_block_start", {"index": self._index, "content_block": block})
            + _event("ping", {})
        )

    def _thinking_events(self) -> str:
        """The thinking block, whole, as Anthropic streams it: its text, then its signature."""
        if not self._thinking:
            return ""
        block = thinking_block(self._meta.id)
        start = {"type": "thinking", "thinking": "", "signature": ""}
        text = {"type": "thinking_delta", "thinking": block["thinking"]}
        signature = {"type": "signature_delta", "signature": block["signature"]}
        return (
            _event("content_block_start", {"index": 0, "content_block": start})
            + _event("content_block_delta", {"index": 0, "delta": text})
            + _event("content_block_delta", {"index": 0, "delta": signature})
            + _event("content_block_stop", {"index": 0})
        )

    def content(self, piece: str) -> str:
        if self._tool is None:
            delta = {"type": "text_delta", "text": piece}
        elif not self._tool_sent:
            self._tool_sent = True
            partial = json.dumps(tool_input(self._tool))
            delta = {"type": "input_json_delta", "partial_json": partial}
        else:
            return _event("ping", {})
        return _event("content_block_delta", {"index": self._index, "delta": delta})

    def finish(self, reason: str, timings_obj: dict[str, Any] | None = None) -> str:
        stop = "tool_calls" if self._tool is not None and reason == "stop" else reason
        return _event("content_block_stop", {"index": self._index}) + _event(
            "message_delta",
            {
                "delta": {"stop_reason": STOP_REASONS.get(stop, stop), "stop_sequence": None},
                "usage": {"output_tokens": self._usage["output_tokens"]},
            },
        )

    def done(self) -> str:
        return _event("message_stop", {})

    def garbage(self) -> str:
        return 'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"del\n\n'

    def error(self, status: int, message: str) -> str:
        """An ``error`` event: how Anthropic reports an overload after the 200."""
        kind = _ERROR_TYPES.get(status, "api_error")
        return _event("error", {"error": {"type": kind, "message": message}})
