"""What a response that gptgate did not parse itself tells the limit (``gate.http_client``,
``@gate.guard``): output tokens, and for a stream the time to its first token.

``concurrency="auto"`` normalises latency per output token, so that a long answer is not read
as congestion, and reads a server queue in the time to first token. Traffic that an SDK sends
through ``gate.http_client`` is only bytes to gptgate, and ``@gate.guard`` only sees the
SDK's return value — without this, such calls reach the limit as bare latencies.

:class:`ResponseTap` watches the body as the SDK reads it — at most :data:`MAX_JSON_BYTES` of
a JSON body, and for an event stream one SSE decoder that keeps no text — and never changes
what the SDK gets: anything it cannot read — or any error of its own — leaves the counts
unknown and stops it watching, never the SDK's read.
"""

from __future__ import annotations

import json
from typing import Any

from .wire import SSEDecoder, parse_usage

__all__ = ["MAX_JSON_BYTES", "ResponseTap", "usage_of"]

#: a chat completion's JSON is a few KB; past this the tap stops buffering (no usage then)
MAX_JSON_BYTES = 4 * 1024 * 1024


class ResponseTap:
    """Fed the body chunks of one response (with the clock reading at each); reports
    ``ttft_s`` (streams: the first chunk carrying content), ``input_tokens`` and
    ``output_tokens`` (None when the response did not say)."""

    __slots__ = (
        "_buffer",
        "_decoder",
        "_size",
        "_start",
        "input_tokens",
        "output_tokens",
        "ttft_s",
    )

    def __init__(self, content_type: str, start: float) -> None:
        self._start = start
        self._decoder = SSEDecoder() if content_type.startswith("text/event-stream") else None
        self._buffer: list[bytes] | None = (
            [] if self._decoder is None and "json" in content_type else None
        )
        self._size = 0
        self.ttft_s: float | None = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None

    def feed(self, chunk: bytes, now: float) -> None:
        try:
            if self._decoder is not None:
                for event in self._decoder.feed(chunk):
                    self._event(event.data, now)
            elif self._buffer is not None:
                self._size += len(chunk)
                if self._size > MAX_JSON_BYTES:
                    self._buffer = None
                else:
                    self._buffer.append(chunk)
        except Exception:
            self._give_up()

    def close(self, now: float) -> None:
        try:
            if self._decoder is not None:
                for event in self._decoder.close():
                    self._event(event.data, now)
            elif self._buffer is not None:
                self._take_usage(_loads(b"".join(self._buffer)))
        except Exception:
            self._give_up()
        self._decoder = self._buffer = None

    def _give_up(self) -> None:
        """The SDK's bytes come first: stop watching, and claim to know nothing."""
        self._decoder = self._buffer = None
        self.ttft_s = self.input_tokens = self.output_tokens = None

    def _event(self, data: str, now: float) -> None:
        if data.strip() == "[DONE]":
            return
        chunk = _loads(data)
        if not isinstance(chunk, dict):
            return
        if self.ttft_s is None and _has_content(chunk):
            self.ttft_s = max(0.0, now - self._start)
        self._take_usage(chunk)

    def _take_usage(self, obj: Any) -> None:
        usage = parse_usage(obj.get("usage")) if isinstance(obj, dict) else None
        if usage is not None:
            self.input_tokens = usage.input_tokens
            self.output_tokens = usage.output_tokens


def usage_of(result: object) -> tuple[int | None, int | None]:
    """``(input_tokens, output_tokens)`` of an SDK's return value that carries a ``usage``
    (an openai ``ChatCompletion``, or a dict shaped like one); ``(None, None)`` otherwise."""
    usage = result.get("usage") if isinstance(result, dict) else getattr(result, "usage", None)
    if usage is None:
        return None, None
    if not isinstance(usage, dict):
        usage = {
            "prompt_tokens": getattr(usage, "prompt_tokens", None),
            "completion_tokens": getattr(usage, "completion_tokens", None),
        }
    parsed = parse_usage(usage)
    if parsed is None:
        return None, None
    return parsed.input_tokens, parsed.output_tokens


def _loads(body: bytes | str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _has_content(chunk: dict[str, Any]) -> bool:
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    delta = choices[0].get("delta")
    return isinstance(delta, dict) and bool(delta.get("content") or delta.get("tool_calls"))
