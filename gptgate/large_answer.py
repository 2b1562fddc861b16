"""What a JSON answer too large for the tap's buffer says of itself (gptgate/observe.py).

:class:`~gptgate.observe.ResponseTap` buffers at most ``MAX_JSON_BYTES`` of a JSON body to read
its usage, and gave up past that: a long answer with ``top_logprobs=20`` (~1.2 KB of JSON a
token), a Responses API answer carrying a generated image, an audio answer's base64 — each
was booked nothing and taught the limit nothing. Such a body keeps its small fields where
every provider puts them: ``id`` and ``model`` first, ``usage`` last (after ``choices``, a
Response's ``output``, a Message's ``content``). :class:`LargeAnswer` keeps the body's head
and tail only, and reads those fields from them.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["HEAD_BYTES", "TAIL_BYTES", "LargeAnswer"]

#: the head kept: the answer's ``id`` and ``model`` come first
HEAD_BYTES = 4096
#: the tail kept: the ``usage`` object and the few fields after it
TAIL_BYTES = 64 * 1024
#: a key in the body's own text: a quote inside a JSON string is escaped, so ``"usage":`` with
#: a bare quote is a key (``"tool_usage"`` is not this one)
_USAGE = re.compile(rb'"usage"\s*:\s*\{')
_HEAD_FIELDS = {name: re.compile(rb'"' + name.encode() + rb'"\s*:\s*("(?:[^"\\]|\\.)*")')
                for name in ("id", "model")}


class LargeAnswer:
    """The head and the tail of a JSON body fed past the buffer (chunks in order)."""

    __slots__ = ("_head", "_tail")

    def __init__(self, start: bytes) -> None:
        self._head = bytes(start[:HEAD_BYTES])
        self._tail = bytearray(start[-TAIL_BYTES:])

    def feed(self, chunk: bytes) -> None:
        if len(self._head) < HEAD_BYTES:
            self._head += chunk[: HEAD_BYTES - len(self._head)]
        self._tail += chunk
        if len(self._tail) > TAIL_BYTES:
            del self._tail[:-TAIL_BYTES]

    def summary(self) -> dict[str, Any]:
        """``{"id", "model", "usage"}`` as found (each only when found)."""
        found: dict[str, Any] = {}
        for name, pattern in _HEAD_FIELDS.items():
            match = pattern.search(self._head)
            if match is not None:
                value = _loads(match.group(1))
                if isinstance(value, str):
                    found[name] = value
        usage = self._usage()
        if usage is not None:
            found["usage"] = usage
        return found

    def _usage(self) -> dict[str, Any] | None:
        tail = bytes(self._tail)
        decoder = json.JSONDecoder()
        for match in reversed(list(_USAGE.finditer(tail))):
            text = tail[match.end() - 1 :].decode("utf-8", "replace")
            try:
                value, _ = decoder.raw_decode(text)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
        return None


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None
