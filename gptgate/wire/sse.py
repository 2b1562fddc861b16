"""An incremental server-sent-events decoder: bytes in, events out.

It follows the WHATWG EventSource parsing rules, because network reads split a stream
anywhere — inside a line, inside a CRLF, inside a multi-byte UTF-8 character — and real
servers add comments, BOMs and odd line endings. Only complete lines are decoded, so a split
character is never mis-decoded; invalid UTF-8 becomes U+FFFD instead of an exception.

The work per read is a couple of ``bytes.rfind`` calls, one ``decode`` and one ``split``:
no per-byte Python loop on the hot path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["SSEDecoder", "SSEEvent"]

_BOM = "\ufeff"

#: ``error: {json}`` — not an EventSource field, but how llama-server (until its October 2025
#: rework, llama.cpp PR 16486) sends a streamed request's failure, the first one included: it
#: is decoded as ``event: error`` with that data, where the rules would drop it and leave a
#: stream that merely ended without ``[DONE]``
_ERROR_FIELD = "error"


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event. ``event`` is None when the server sent no (or an empty) type,
    which EventSource calls "message"; ``id`` is the last event id seen so far, per the spec;
    ``retry`` is a reconnection time (ms) sent within this event, if any."""

    event: str | None
    data: str
    id: str | None = None
    retry: int | None = None


def _is_complete_payload(value: str) -> bool:
    """Whether an unterminated ``data:`` payload at EOF is whole (the ``[DONE]`` marker or
    parseable JSON) rather than cut mid-way."""
    if value.strip() == "[DONE]":
        return True
    try:
        json.loads(value)
    except ValueError:
        return False
    return True


class SSEDecoder:
    """Feed it the byte chunks of one response body; it returns the events completed so far.

    Call :meth:`close` at EOF: it dispatches an event left without its blank line (servers do
    that) and decides what to do with an unterminated last line. ``truncated`` tells whether
    that last line had to be dropped because it was visibly cut.
    """

    __slots__ = (
        "_data",
        "_event",
        "_id",
        "_parts",
        "_retry",
        "_skip_lf",
        "_started",
        "truncated",
    )

    def __init__(self) -> None:
        self._parts: list[bytes] = []  # bytes of the current, unterminated line
        self._skip_lf = False  # the last read ended in CR: a LF opening the next one is its pair
        self._started = False  # past the first line (where a BOM may sit)
        self._data: list[str] = []
        self._event: str | None = None
        self._id: str | None = None
        self._retry: int | None = None
        #: True when :meth:`close` dropped an unterminated last line that was cut mid-way
        self.truncated = False

    @property
    def last_event_id(self) -> str | None:
        return self._id

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume one network read; return the events it completed (often none or one)."""
        if self._skip_lf:
            if not chunk:
                return []
            self._skip_lf = False
            if chunk[0] == 10:  # b"\n"
                chunk = chunk[1:]
        cut = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if cut < 0:
            if chunk:
                self._parts.append(chunk)
            return []
        rest = cut + 1
        if chunk[cut] == 13:  # b"\r"
            if rest == len(chunk):  # maybe the first half of a CRLF split across reads
                self._skip_lf = True
        elif cut and chunk[cut - 1] == 13:  # the block ends before the whole CRLF
            cut -= 1
        if self._parts:
            self._parts.append(chunk[:cut])
            block = b"".join(self._parts)
            self._parts.clear()
        else:
            block = chunk[:cut]
        if rest < len(chunk):
            self._parts.append(chunk[rest:])
        return self._lines(block.decode("utf-8", "replace"))

    def close(self) -> list[SSEEvent]:
        """End of stream: flush what a lenient reader should still deliver."""
        events: list[SSEEvent] = []
        if self._parts:
            line = b"".join(self._parts).decode("utf-8", "replace")
            self._parts.clear()
            if not self._started:
                self._started = True
                if line.startswith(_BOM):
                    line = line[1:]
            field, colon, value = line.partition(":")
            if colon and field in ("data", _ERROR_FIELD):
                if value.startswith(" "):
                    value = value[1:]
                if _is_complete_payload(value):
                    self._data.append(value)
                    if field == _ERROR_FIELD:
                        self._event = "error"
                else:
                    self.truncated = True
            elif line:
                self.truncated = True
        if self._data:
            events.append(self._dispatch())
        self._skip_lf = False
        return events

    def _dispatch(self) -> SSEEvent:
        data = self._data
        event = SSEEvent(
            self._event or None,
            data[0] if len(data) == 1 else "\n".join(data),
            self._id,
            self._retry,
        )
        self._data = []
        self._event = None
        self._retry = None
        return event

    def _lines(self, text: str) -> list[SSEEvent]:
        """Process complete lines (``text`` holds them without the final terminator)."""
        if not self._started:
            self._started = True
            if text.startswith(_BOM):
                text = text[1:]
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        events: list[SSEEvent] = []
        for line in text.split("\n"):
            if not line:
                if self._data:
                    events.append(self._dispatch())
                else:  # an event without data is not dispatched, but its fields end here
                    self._event = None
                    self._retry = None
                continue
            if line.startswith("data: "):  # the hot path: skip the generic field split
                self._data.append(line[6:])
                continue
            if line[0] == ":":  # comment, e.g. ": keep-alive"
                continue
            field, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if field == "data":
                self._data.append(value)
            elif field == "event":
                self._event = value
            elif field == "id":
                if "\x00" not in value:
                    self._id = value
            elif field == "retry" and value.isascii() and value.isdigit():
                self._retry = int(value)
            elif field == _ERROR_FIELD:  # llama-server before its 2025 rework
                self._event = "error"
                self._data.append(value)
        return events
