"""Anthropic's Messages answers, whole or streamed, as the call path's :class:`ParsedChat`.

The answer comes back shaped like a chat completion (``raw["choices"][0]["message"]`` with
``content`` and ``tool_calls``, an OpenAI-style ``usage``), so a caller switching provider
reads the same fields. Stop reasons map to OpenAI's finish reasons: ``end_turn`` and
``stop_sequence`` → ``stop``, ``max_tokens`` → ``length``, ``tool_use`` → ``tool_calls``,
``refusal`` → ``content_filter``; ``pause_turn`` (a server tool's long turn, paused: send it
back to continue) stays ``pause_turn``. Blocks the OpenAI shape has no place for (a server
tool's, citations) keep the whole content on the message (anthropic_server_tools.py).

A stream is ``message_start`` (id, model, the input side of the usage), content blocks
(``text_delta`` text, ``input_json_delta`` tool arguments), ``message_delta`` (stop reason,
output tokens), ``message_stop``; ``ping`` is ignored and an ``error`` event raises its mapped
error (the commit-point rules of :class:`ChatStreamReader` apply unchanged).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, Mapping
from typing import Any

from gptgate.errors import BackendError, GateError
from gptgate.results import Usage
from gptgate.token_scripts import text_chars
from gptgate.wire.anthropic_overload import is_overload, overload_error, overload_message
from gptgate.wire.anthropic_server_tools import (
    BLOCKS_KEY,
    BlockFold,
    count_search,
    kept_blocks,
)
from gptgate.wire.anthropic_thinking import ThinkingFold, kept_thinking
from gptgate.wire.openai import (
    ChatStreamReader,
    ParsedChat,
    StreamAccumulator,
    _in_band_error,
    _malformed,
    load_answer,
)
from gptgate.wire.sse import SSEEvent
from gptgate.wire.usage import parse_anthropic_usage

__all__ = ["FINISH_REASONS", "MessagesAccumulator", "MessagesStreamReader", "parse_message"]

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def _finish(reason: Any) -> str | None:
    return FINISH_REASONS.get(reason, reason) if isinstance(reason, str) else None


def _openai_usage(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {
            "cached_tokens": usage.cached_input_tokens,
            "cache_write_tokens": usage.cache_write_input_tokens,
        },
    }


def _completion(
    response_id: str | None,
    model: str | None,
    text: str,
    tool_calls: list[dict[str, Any]],
    finish_reason: str | None,
    usage: Usage | None,
    thinking: list[dict[str, Any]],
    blocks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if thinking:  # sent back with this turn in a tool loop (anthropic_thinking.py)
        message["thinking_blocks"] = thinking
    if blocks is not None:  # sent back as they are, to continue a paused turn
        message[BLOCKS_KEY] = blocks
    raw: dict[str, Any] = {
        "id": response_id,
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if usage is not None:
        raw["usage"] = _openai_usage(usage)
    return raw


def _tool_call(block: Mapping[str, Any], arguments: str) -> dict[str, Any]:
    return {
        "id": block.get("id"),
        "type": "function",
        "function": {"name": block.get("name") or "", "arguments": arguments},
    }


def parse_message(
    body: bytes,
    *,
    backend: str,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
) -> ParsedChat:
    """A non-streamed Messages answer; its ``{"type": "error"}`` body raises the mapped error,
    anything that is not a message a :class:`BackendError`."""
    obj = load_answer(body, backend=backend, status=status, headers=headers)
    if obj.get("type") == "error":  # an error object without its "error" member
        raise _in_band_error(obj, backend=backend, status=status, headers=headers)
    content = obj.get("content")
    if not isinstance(content, list):
        raise _malformed("response has no content", backend, status, headers)
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            calls.append(_tool_call(block, json.dumps(block.get("input") or {})))
    text = "".join(texts)
    finish = _finish(obj.get("stop_reason"))
    usage = parse_anthropic_usage(obj.get("usage"))
    rid = obj.get("id") if isinstance(obj.get("id"), str) else None
    model = obj.get("model") if isinstance(obj.get("model"), str) else None
    return ParsedChat(
        text=text,
        finish_reason=finish,
        usage=usage,
        response_id=rid,
        model=model,
        raw=_completion(
            rid, model, text, calls, finish, usage, kept_thinking(content), kept_blocks(content)
        ),
    )


class MessagesAccumulator(StreamAccumulator):
    """Folds Messages stream events into one answer (see the module docstring)."""

    __slots__ = ("_blocks", "_counted", "_fold", "_thinking", "_usage_obj", "stopped")

    def __init__(self, *, backend: str | None = None, request_id: str | None = None) -> None:
        super().__init__(backend=backend, request_id=request_id)
        self._usage_obj: dict[str, Any] = {}
        #: tool_use blocks by index: [the block, its argument JSON so far]
        self._blocks: dict[int, list[Any]] = {}
        self._thinking = ThinkingFold()
        self._fold = BlockFold()  # every block, kept when one has no OpenAI shape
        #: ``message_stop`` arrived: the answer is whole
        self.stopped = False
        #: ``message_delta`` gave the output's count (``message_start``'s is the first token's)
        self._counted = False

    @property
    def counted_usage(self) -> Usage | None:
        return self.usage if self._counted else None

    def feed(self, chunk: Mapping[str, Any]) -> str:
        self.chunks += 1
        kind = chunk.get("type")
        if kind == "content_block_delta":
            self.generating = True  # text, a tool call's input or thinking
            delta = chunk.get("delta")
            if not isinstance(delta, dict):
                return ""
            self._fold.delta(chunk.get("index"), delta)
            if self._thinking.delta(chunk.get("index"), delta):
                thought = delta.get("thinking")  # billed as output; a signature is not
                self.side.chars += text_chars(thought) if isinstance(thought, str) else 0
                return ""
            text = delta.get("text")
            if delta.get("type") == "text_delta" and isinstance(text, str) and text:
                self._parts.append(text)
                self.has_content = True
                return text
            partial = delta.get("partial_json")
            if isinstance(partial, str):  # a tool's input, a server tool's too: output
                self.side.chars += text_chars(partial)
            block = self._blocks.get(chunk.get("index", -1))
            if block is not None and isinstance(partial, str):
                block[1] += partial
        elif kind == "message_start":
            message = chunk.get("message")
            if isinstance(message, dict):
                if isinstance(message.get("id"), str):
                    self.response_id = message["id"]
                if isinstance(message.get("model"), str):
                    self.model = message["model"]
                self._take_usage(message.get("usage"))
        elif kind == "content_block_start":
            block = chunk.get("content_block")
            if isinstance(block, dict):
                self._fold.start(chunk.get("index"), block)
                if count_search(block, self._usage_obj):  # billed, even if cut before the count
                    self._take_usage({})
            if not isinstance(block, dict) or self._thinking.start(chunk.get("index"), block):
                return ""
            if block.get("type") == "tool_use":
                self._blocks[chunk.get("index", len(self._blocks))] = [block, ""]
            elif block.get("text"):
                self._parts.append(block["text"])
                self.has_content = True
                return str(block["text"])
        elif kind == "message_delta":
            delta = chunk.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason") is not None:
                self.finish_reason = _finish(delta["stop_reason"])
            self._take_usage(chunk.get("usage"))
            self._counted = self._counted or isinstance(chunk.get("usage"), dict)
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error" or chunk.get("error"):
            raise _in_band_error(chunk.get("error") or chunk, backend=self._backend,
                                 status=None, request_id=self._request_id)
        return ""

    def _take_usage(self, usage: Any) -> None:
        """``message_delta``'s usage updates the counts ``message_start`` gave (output
        tokens always; newer servers repeat the input side too)."""
        if isinstance(usage, dict):
            self._usage_obj.update({k: v for k, v in usage.items() if v is not None})
            self.usage = parse_anthropic_usage(self._usage_obj)

    def result(self) -> ParsedChat:
        text = self.text
        calls = [
            _tool_call(block, arguments or "{}")
            for _, (block, arguments) in sorted(self._blocks.items())
        ]
        return ParsedChat(
            text=text,
            finish_reason=self.finish_reason,
            usage=self.usage,
            response_id=self.response_id,
            model=self.model,
            raw=_completion(
                self.response_id, self.model, text, calls, self.finish_reason, self.usage,
                self._thinking.blocks(), self._fold.blocks(),
            ),
        )


class MessagesStreamReader(ChatStreamReader):
    """:class:`ChatStreamReader` over Messages events: complete at ``message_stop`` (or at
    EOF after a stop reason), with :class:`MessagesAccumulator` folding the events."""

    __slots__ = ()

    def __init__(
        self, byte_stream: AsyncIterable[bytes], *, backend: str, request_id: str | None = None
    ) -> None:
        super().__init__(byte_stream, backend=backend, request_id=request_id)
        self.accumulator = MessagesAccumulator(backend=backend, request_id=request_id)

    def _handle(self, events: list[SSEEvent]) -> None:
        super()._handle(events)
        accumulator = self.accumulator
        if isinstance(accumulator, MessagesAccumulator) and accumulator.stopped:
            self.done_seen = True

    def _error_event(self, data: str) -> GateError:
        """An overload before the answer began is its 529 (anthropic_overload.py)."""
        payload = _loads(data)
        if not self.accumulator.generating and is_overload(payload):
            return overload_error(
                overload_message(payload), backend=self._backend, request_id=self._request_id
            )
        return super()._error_event(data)

    def _fail(self, error: GateError) -> None:
        if isinstance(error, BackendError) and error.status == 529 and (
            not self.accumulator.generating
        ):
            self._error = error  # no token generated: nothing billed, as for its 529
            return
        super()._fail(error)


def _loads(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None
