"""The answer of a response gptgate did not parse itself (``gate.http_client``), for the
span's ``gen_ai.output.messages`` when ``capture_content`` is on.

:class:`~gptgate.observe.ResponseTap` counts an answer's characters and keeps none of them;
this keeps them — only when capture is on, so a span can show what the model said, as
``gate.chat``'s do. It reads what the tap already parsed: a JSON body (OpenAI's chat and
completions, the Responses API, Anthropic's Messages) or a stream's events (their deltas,
tool calls' arguments included). A stream's text is kept up to :data:`MAX_ANSWER_CHARS`
(text and tool arguments together), past which the rest is dropped: the bound is the
memory a long stream can take, whatever the answer's length.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_ANSWER_CHARS", "AnswerText"]

#: characters of answer (text and tool arguments) kept per response
MAX_ANSWER_CHARS = 256 * 1024


class _Call:
    """One tool call, assembled from its deltas."""

    __slots__ = ("arguments", "id", "name")

    def __init__(self, call_id: Any = None, name: Any = None) -> None:
        self.id = call_id if isinstance(call_id, str) else None
        self.name = name if isinstance(name, str) else None
        self.arguments: list[str] = []


class AnswerText:
    """Fed the parsed JSON body or each parsed stream event of one response; ``text`` and
    :meth:`raw` (OpenAI's shape, which :func:`~gptgate.genai_content.output_messages`
    reads tool calls from) are the answer."""

    __slots__ = ("_calls", "_left", "_text")

    def __init__(self) -> None:
        self._text: list[str] = []
        #: index in the stream (OpenAI's ``tool_calls[].index``, Anthropic's block) → call
        self._calls: dict[Any, _Call] = {}
        self._left = MAX_ANSWER_CHARS

    @property
    def text(self) -> str:
        return "".join(self._text)

    def raw(self) -> dict[str, Any]:
        """The tool calls as an OpenAI message's (``arguments`` as the JSON text sent)."""
        calls = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": "".join(c.arguments)}}
            for c in self._calls.values()
        ]
        return {"choices": [{"message": {"tool_calls": calls}}]} if calls else {}

    # -- a whole body ------------------------------------------------------------------------

    def body(self, obj: Any) -> None:
        """A non-streamed response's parsed JSON."""
        if not isinstance(obj, Mapping):
            return
        choices = obj.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            choice = choices[0]
            message = choice.get("message")
            if isinstance(message, Mapping):
                self._add(message.get("content"))
                self._openai_calls(message.get("tool_calls"))
            else:
                self._add(choice.get("text"))  # a text completion
        elif isinstance(obj.get("content"), list):  # Anthropic's Messages
            for index, block in enumerate(obj["content"]):
                self._anthropic_block(index, block, whole=True)
        elif isinstance(obj.get("output"), list):  # the Responses API
            for item in obj["output"]:
                self._responses_item(item)

    # -- a stream's events -------------------------------------------------------------------

    def event(self, chunk: Mapping[str, Any]) -> None:
        """One parsed event of a stream (chat, completions, Responses, Anthropic)."""
        kind = chunk.get("type")
        if kind == "content_block_start":
            self._anthropic_block(chunk.get("index"), chunk.get("content_block"), whole=False)
        elif kind == "content_block_delta":
            delta = chunk.get("delta")
            if isinstance(delta, Mapping):
                if delta.get("type") == "input_json_delta":
                    self._argument(chunk.get("index"), delta.get("partial_json"))
                elif delta.get("type") == "text_delta":
                    self._add(delta.get("text"))
        elif kind == "response.output_text.delta":
            self._add(chunk.get("delta"))
        elif kind == "response.output_item.done":
            item = chunk.get("item")
            if isinstance(item, Mapping) and item.get("type") == "function_call":
                self._responses_item(item)
        else:
            choices = chunk.get("choices")
            if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
                delta = choices[0].get("delta")
                if isinstance(delta, Mapping):
                    self._add(delta.get("content"))
                    self._call_deltas(delta.get("tool_calls"))
                else:
                    self._add(choices[0].get("text"))

    # -- the formats' parts ------------------------------------------------------------------

    def _openai_calls(self, calls: Any) -> None:
        if not isinstance(calls, list):
            return
        for index, call in enumerate(calls):
            if isinstance(call, Mapping):
                function = call.get("function")
                function = function if isinstance(function, Mapping) else {}
                self._calls[index] = _Call(call.get("id"), function.get("name"))
                self._argument(index, function.get("arguments"))

    def _call_deltas(self, deltas: Any) -> None:
        if not isinstance(deltas, list):
            return
        for delta in deltas:
            if not isinstance(delta, Mapping):
                continue
            index = delta.get("index", len(self._calls))
            function = delta.get("function")
            function = function if isinstance(function, Mapping) else {}
            if index not in self._calls:
                self._calls[index] = _Call(delta.get("id"), function.get("name"))
            self._argument(index, function.get("arguments"))

    def _anthropic_block(self, index: Any, block: Any, *, whole: bool) -> None:
        if not isinstance(block, Mapping):
            return
        if block.get("type") == "text":
            self._add(block.get("text"))
        elif block.get("type") == "tool_use":
            self._calls[index] = _Call(block.get("id"), block.get("name"))
            if whole:  # a stream's start says ``input: {}``: its deltas carry the input
                self._argument(index, _json(block.get("input")))

    def _responses_item(self, item: Any) -> None:
        if not isinstance(item, Mapping):
            return
        if item.get("type") == "message" and isinstance(item.get("content"), list):
            for part in item["content"]:
                if isinstance(part, Mapping) and part.get("type") == "output_text":
                    self._add(part.get("text"))
        elif item.get("type") == "function_call":
            key = ("responses", len(self._calls))
            self._calls[key] = _Call(item.get("call_id"), item.get("name"))
            self._argument(key, item.get("arguments"))

    def _add(self, piece: Any) -> None:
        kept = self._take(piece)
        if kept:
            self._text.append(kept)

    def _argument(self, index: Any, piece: Any) -> None:
        call = self._calls.get(index)
        kept = self._take(piece)
        if call is not None and kept:
            call.arguments.append(kept)

    def _take(self, piece: Any) -> str:
        """As much of ``piece`` as the bound leaves room for."""
        if not isinstance(piece, str) or self._left <= 0:
            return ""
        kept = piece[: self._left]
        self._left -= len(kept)
        return kept


def _json(value: Any) -> str | None:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return None
