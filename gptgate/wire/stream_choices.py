"""A stream's output besides choice 0's text and tool calls: the other choices of ``n > 1``,
``logprobs`` and a structured-output ``refusal``.

A non-streamed answer keeps all of them (its ``raw`` is the server's JSON); the stream's
accumulator took choice 0's text only, so ``gate.stream(..., n=2)`` silently lost the second
answer, ``logprobs=True`` gave none, and a strict ``json_schema`` refusal (``delta.refusal``)
came back as an empty answer. They are folded here and put on the result's ``raw`` where a
non-streamed answer has them (``choices[i]``, ``choices[i].logprobs.content``,
``message.refusal``). Their characters count for an answer booked without the server's usage.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gptgate.token_scripts import text_chars

__all__ = ["StreamChoices", "merge_tool_calls"]


def merge_tool_calls(calls: dict[int, dict[str, Any]], deltas: Any) -> int:
    """Fold streamed tool-call ``deltas`` into ``calls`` (by their ``index``: parallel calls
    interleave; without one, a new ``id`` starts a call and a piece without one continues
    the last); return the characters of names and arguments that arrived."""
    if not isinstance(deltas, list):
        return 0
    chars = 0
    for delta in deltas:
        if not isinstance(delta, dict):
            continue
        index: Any = delta.get("index")
        if index is None:  # a server that leaves it out: a new id starts a call
            last = max(calls) if calls else None
            fresh = last is None or (
                isinstance(delta.get("id"), str) and delta["id"] != calls[last]["id"])
            index = len(calls) if fresh or last is None else last
        call = calls.get(index)
        if call is None:
            call = {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            calls[index] = call
        if isinstance(delta.get("id"), str):
            call["id"] = delta["id"]
        if isinstance(delta.get("type"), str):
            call["type"] = delta["type"]
        function = delta.get("function")
        if isinstance(function, dict):
            target = call["function"]
            for key in ("name", "arguments"):
                piece = function.get(key)
                if isinstance(piece, str):
                    target[key] += piece
                    chars += text_chars(piece)
    return chars


class _Extras:
    """One choice's ``logprobs`` entries and ``refusal`` text."""

    __slots__ = ("logprobs", "refusal", "refusal_logprobs")

    def __init__(self) -> None:
        self.logprobs: list[Any] | None = None
        self.refusal_logprobs: list[Any] | None = None
        self.refusal: list[str] | None = None

    def take(self, choice: Mapping[str, Any], delta: Mapping[str, Any]) -> int:
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict):
            if isinstance(logprobs.get("content"), list):
                self.logprobs = (self.logprobs or []) + logprobs["content"]
            if isinstance(logprobs.get("refusal"), list):
                self.refusal_logprobs = (self.refusal_logprobs or []) + logprobs["refusal"]
        refusal = delta.get("refusal")
        if isinstance(refusal, str):
            if self.refusal is None:
                self.refusal = []
            self.refusal.append(refusal)
            return text_chars(refusal)
        return 0

    def put_on(self, choice: dict[str, Any], message: dict[str, Any]) -> None:
        if self.refusal is not None:
            message["refusal"] = "".join(self.refusal)
        if self.logprobs is not None or self.refusal_logprobs is not None:
            choice["logprobs"] = {"content": self.logprobs, "refusal": self.refusal_logprobs}


class _Other:
    """A choice other than 0: its text, tool calls, reasoning, finish reason and extras."""

    __slots__ = ("extras", "finish_reason", "parts", "thought", "tool_calls")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.thought: dict[str, list[str]] = {}
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.extras = _Extras()

    def take(self, choice: Mapping[str, Any], delta: Mapping[str, Any]) -> int:
        chars = 0
        content = delta.get("content")
        if isinstance(content, str) and content:
            self.parts.append(content)
            chars += text_chars(content)
        for name in ("reasoning_content", "reasoning"):
            piece = delta.get(name)
            if isinstance(piece, str) and piece:
                self.thought.setdefault(name, []).append(piece)
                chars += text_chars(piece)
        chars += merge_tool_calls(self.tool_calls, delta.get("tool_calls"))
        if choice.get("finish_reason") is not None:
            self.finish_reason = str(choice["finish_reason"])
        return chars

    def as_choice(self, index: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.parts)}
        for name, pieces in self.thought.items():
            message[name] = "".join(pieces)
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        choice: dict[str, Any] = {
            "index": index, "message": message, "finish_reason": self.finish_reason}
        self.extras.put_on(choice, message)
        return choice


class StreamChoices:
    """Everything of a stream's choices the accumulator does not fold itself (see the module
    docstring); ``chars`` is their output's size, for an estimate."""

    __slots__ = ("_first", "_others", "chars")

    def __init__(self) -> None:
        self._first = _Extras()
        self._others: dict[int, _Other] | None = None
        self.chars = 0

    def feed(self, choice: Mapping[str, Any]) -> None:
        """Take one chunk's ``choice`` (any index)."""
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            delta = {}
        index = choice.get("index", 0)
        if index == 0:
            self.chars += self._first.take(choice, delta)
            return
        if not isinstance(index, int):
            return
        if self._others is None:
            self._others = {}
        other = self._others.get(index)
        if other is None:
            other = self._others[index] = _Other()
        self.chars += other.take(choice, delta) + other.extras.take(choice, delta)

    @property
    def unfinished(self) -> bool:
        """A choice other than 0 began and has no finish reason yet: a stream cut then is
        not whole, though choice 0 ended."""
        return any(other.finish_reason is None for other in (self._others or {}).values())

    def put_on(self, choices: list[dict[str, Any]]) -> None:
        """Complete a result's ``choices`` (choice 0 first, built by the accumulator)."""
        first = choices[0]
        self._first.put_on(first, first["message"])
        for index in sorted(self._others or ()):
            assert self._others is not None
            choices.append(self._others[index].as_choice(index))
