"""What a stream generates besides its text: a reasoning model's thinking, a tool call's pieces.

Both are output the server bills, but neither is the text the caller reads. A stream that ends
before its usage — left by its caller, cut by the server — is booked at what arrived, so they
count (~4 characters a token, as text does): a ``deepseek-reasoner`` stream left mid-reasoning
was booked from the elapsed time through the backend's latency line, 0 before any answer had
taught it (20 streams: 0 output tokens booked where the server billed 1,386). The reasoning is
kept too, for the answer's raw message: DeepSeek's thinking mode wants a tool-calling turn's
``reasoning_content`` back in the loop's next request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gptgate.token_scripts import text_chars
from gptgate.wire.stream_start import reasoning_piece

__all__ = ["SideOutput"]


class SideOutput:
    """One stream's output that is not its text (see the module docstring)."""

    __slots__ = ("_field", "_thought", "chars")

    def __init__(self) -> None:
        #: characters of it so far
        self.chars = 0
        self._thought: list[str] | None = None
        #: the delta field the reasoning came in (``reasoning_content``, or ``reasoning``)
        self._field = "reasoning_content"

    def reasoning(self, delta: Mapping[str, Any]) -> None:
        """Take an OpenAI-style delta's reasoning, if it has some."""
        found = reasoning_piece(delta)
        if found is None:
            return
        field, piece = found
        if self._thought is None:
            self._thought, self._field = [], field
        self._thought.append(piece)
        self.chars += text_chars(piece)

    def tool_piece(self, function: Mapping[str, Any]) -> None:
        """Count a tool call's delta (its name's and arguments' pieces)."""
        for key in ("name", "arguments"):
            piece = function.get(key)
            if isinstance(piece, str):
                self.chars += text_chars(piece)

    def put_on(self, message: dict[str, Any]) -> None:
        """Put the reasoning on the answer's message, as a non-streamed answer has it."""
        if self._thought:
            message[self._field] = "".join(self._thought)
