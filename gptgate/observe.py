"""What a response that gptgate did not parse itself tells the limit (``gate.http_client``,
``@gate.guard``): output tokens, and for a stream the time to its first token.

``concurrency="auto"`` normalises latency per output token, so that a long answer is not read
as congestion, and reads a server queue in the time to first token. Traffic that an SDK sends
through ``gate.http_client`` is only bytes to gptgate, and ``@gate.guard`` only sees the
SDK's return value — without this, such calls reach the limit as bare latencies.

:class:`ResponseTap` watches the body as the SDK reads it — at most :data:`MAX_JSON_BYTES` of
a JSON body (past it, its head and tail: gptgate/large_answer.py), and for an event stream one
SSE decoder that keeps no text — and never changes
what the SDK gets: anything it cannot read — or any error of its own — leaves the counts
unknown and stops it watching, never the SDK's read.
"""

from __future__ import annotations

import json
from typing import Any

from .large_answer import LargeAnswer
from .results import Usage
from .sdk_in_band import in_band_failure
from .tap_answer import AnswerText
from .token_scripts import text_chars
from .tokens import CHARS_PER_TOKEN, tokens_for_chars
from .wire import SSEDecoder, parse_usage
from .wire.anthropic_server_tools import count_search
from .wire.anthropic_stream import FINISH_REASONS
from .wire.html_page import is_html_page
from .wire.slot_timings import answer_usage
from .wire.stream_start import reasoning_chars

__all__ = ["MAX_JSON_BYTES", "ResponseTap", "usage_from"]

#: the Responses API's events that end an answer: a caller that stops reading there left none
#: of it unread (``response.incomplete``: ``max_output_tokens`` reached, or a content filter)
_RESPONSES_ENDS = frozenset({"response.completed", "response.incomplete"})
#: a Responses API object's statuses that say its answer ended — not ``in_progress`` or
#: ``queued``, which ``response.created`` carries: read as a finish reason, a stream cut
#: after it looked finished (gptgate/stream_cut.py) and counted as a success
_RESPONSES_FINISHED = frozenset({"completed", "incomplete", "failed", "cancelled"})
#: a chat completion's JSON is a few KB; past this the tap keeps the body's head and tail only
MAX_JSON_BYTES = 4 * 1024 * 1024


class ResponseTap:
    """Fed the body chunks of one response (with the clock reading at each); reports
    ``ttft_s`` (streams: the first chunk carrying content), ``input_tokens`` and
    ``output_tokens`` (None when the response did not say)."""

    __slots__ = (
        "_buffer",
        "_decoder",
        "_first_chars",
        "_large",
        "_messages_usage",
        "_size",
        "_sse",
        "_start",
        "answer",
        "complete",
        "content_chars",
        "events",
        "failure",
        "finish_reason",
        "input_tokens",
        "last_content_s",
        "malformed",
        "output_counted",
        "output_tokens",
        "page",
        "received",
        "response_id",
        "response_model",
        "ttft_s",
        "usage",
    )

    def __init__(self, content_type: str, start: float) -> None:
        self._start = start
        self._sse = content_type.startswith("text/event-stream")
        self._decoder = SSEDecoder() if self._sse else None
        self._buffer: list[bytes] | None = (
            [] if self._decoder is None and "json" in content_type else None
        )
        self._size = 0
        #: the head and tail of a JSON body past ``MAX_JSON_BYTES`` (gptgate/large_answer.py)
        self._large: LargeAnswer | None = None
        #: an Anthropic stream's usage so far (message_start's, updated by message_delta's)
        self._messages_usage: dict[str, Any] | None = None
        self.ttft_s: float | None = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        #: ``output_tokens`` is the server's count of the whole answer — not an Anthropic
        #: ``message_start``'s first token, which ``message_delta`` replaces
        self.output_counted = False
        #: the whole usage the response reported (cache reads and writes, reasoning), or None
        self.usage: Usage | None = None
        #: characters of answer text seen in a stream's deltas (an estimate's base when no
        #: usage comes: the SDK's default is a stream without ``include_usage``)
        self.content_chars = 0
        #: seconds from the send to the last content delta (None before one)
        self.last_content_s: float | None = None
        self._first_chars = 0
        #: a stream's ``[DONE]`` (or the Responses API's ``response.completed`` or
        #: ``response.incomplete``) arrived: the answer is whole even if the reader leaves
        #: before the connection's end
        self.complete = False
        #: bytes of body seen (a cut body with none answered nothing)
        self.received = 0
        #: a stream's events so far (its comments, keep-alives, are none): its progress
        self.events = 0
        #: the body could not be read as its content type says (a JSON body cut short, a
        #: broken event): an answer the server generated and billed, whatever the SDK makes of it
        self.malformed = False
        #: a proxy's HTML page, not the server's answer: no model ran, so nothing was billed
        #: (gptgate/wire/html_page.py); the backend's failure all the same
        self.page = "text/html" in content_type.lower()
        self.response_id: str | None = None
        self.response_model: str | None = None
        self.finish_reason: str | None = None
        #: the answer's text and tool calls, kept only when set (``capture_content``)
        self.answer: AnswerText | None = None
        #: the error the answer said it ended in (gptgate/sdk_in_band.py), None: none
        self.failure: Any = None

    @property
    def streamed(self) -> bool:
        """An event stream (its tokens arrive in deltas), not one JSON body."""
        return self._decoder is not None or self._sse

    def feed(self, chunk: bytes, now: float) -> None:
        self.received += len(chunk)
        try:
            if self._decoder is not None:
                for event in self._decoder.feed(chunk):
                    self.events += 1
                    self._event(event.data, now, event.event)
            elif self._buffer is not None:
                self._size += len(chunk)
                self._buffer.append(chunk)
                if self._size > MAX_JSON_BYTES:  # its head and tail kept from here
                    self._large = LargeAnswer(b"".join(self._buffer))
                    self._buffer = None
            elif self._large is not None:
                self._large.feed(chunk)
            elif self._sse:  # no longer decoded (it could not be): any bytes are progress
                self.events += 1
        except Exception:
            self._give_up()

    def close(self, now: float) -> None:
        try:
            if self._decoder is not None:
                for event in self._decoder.close():
                    self._event(event.data, now, event.event)
            elif self._buffer is not None:
                body = b"".join(self._buffer)
                parsed = _loads(body)
                self.malformed = parsed is None and bool(body.strip())
                self.page = self.page or (self.malformed and is_html_page(body, ""))
                self._take_usage(parsed)
                self._keep_answer(parsed, whole=True)
                self.failure = in_band_failure(parsed)
            elif self._large is not None:  # its usage from its tail: no answer on the span
                self._take_usage(self._large.summary())
        except Exception:
            self._give_up()
        self._decoder = self._buffer = self._large = None

    def _give_up(self) -> None:
        """The SDK's bytes come first: stop watching, and claim to know nothing."""
        self.malformed = True
        self._decoder = self._buffer = self._large = None
        self.ttft_s = self.input_tokens = self.output_tokens = self.usage = None
        self.output_counted = False
        self.content_chars = 0
        self.answer = None

    def _keep_answer(self, parsed: Any, *, whole: bool) -> None:
        """Hand the answer's keeper what was parsed; its error drops the answer only."""
        if self.answer is None:
            return
        try:
            if whole:
                self.answer.body(parsed)
            else:
                self.answer.event(parsed)
        except Exception:
            self.answer = None

    def _event(self, data: str, now: float, name: str | None = None) -> None:
        if data.strip() == "[DONE]":
            self.complete = True
            return
        chunk = _loads(data)
        if self.failure is None:
            self.failure = in_band_failure(chunk)
            if self.failure is None and name == "error":  # an error event with no error object
                self.failure = chunk or data or "error event"
        if not isinstance(chunk, dict):
            return
        self._keep_answer(chunk, whole=False)
        kind = chunk.get("type")
        if kind in _RESPONSES_ENDS:
            self.complete = True
        elif isinstance(kind, str) and kind.startswith(("message_", "content_block_")):
            self._messages_event(kind, chunk, now)
            return
        content = _content_chars(chunk)
        if content:
            self._content(content, now)
        response = chunk.get("response")  # the Responses API wraps its object in events
        self._take_usage(response if isinstance(response, dict) else chunk)

    def _content(self, chars: int, now: float) -> None:
        self.content_chars += chars
        self.last_content_s = max(0.0, now - self._start)
        if self.ttft_s is None:
            self.ttft_s = self.last_content_s
            self._first_chars = chars

    def paced_output(self, elapsed_s: float, max_tokens: int | None) -> int:
        """The answer's output ``elapsed_s`` after the send had the server gone on at the
        pace its deltas arrived after the first (what was seen, with one delta: no pace):
        what a stream its caller left had generated by then, when the backend has taught no
        pace of its own yet."""
        seen = self.output_so_far()
        first, last = self.ttft_s, self.last_content_s
        if first is None or last is None or last <= first:
            return seen
        per_s = (self.content_chars - self._first_chars) / CHARS_PER_TOKEN / (last - first)
        paced = seen + int(per_s * max(0.0, elapsed_s - last))
        return min(paced, max_tokens) if max_tokens else paced

    def _messages_event(self, kind: str, chunk: dict[str, Any], now: float) -> None:
        """One event of an Anthropic Messages stream: text and tool-argument deltas, the
        usage of message_start updated by message_delta's, message_stop the end."""
        if kind == "message_stop":
            self.complete = True
        elif kind == "content_block_delta":
            delta = chunk.get("delta")
            piece = None
            if isinstance(delta, dict):
                piece = delta.get("text") or delta.get("partial_json") or delta.get("thinking")
            if isinstance(piece, str) and piece:
                self._content(text_chars(piece), now)
        elif kind == "content_block_start":  # a web search's result: billed, counted or not
            block = chunk.get("content_block")
            so_far = dict(self._messages_usage or {})
            if isinstance(block, dict) and count_search(block, so_far):
                self._messages_event("message_delta", {"usage": so_far}, now)
                self.output_counted = False  # the output's count is still to come
        elif kind in ("message_start", "message_delta"):
            obj = chunk.get("message") if kind == "message_start" else chunk
            if not isinstance(obj, dict):
                return
            usage = obj.get("usage")
            merged = self._messages_usage = {
                **(self._messages_usage or {}), **(usage if isinstance(usage, dict) else {})
            }
            delta = obj.get("delta")
            self._take_usage({**obj, **(delta if isinstance(delta, dict) else {}), "usage": merged})
            self.output_counted = kind == "message_delta" and isinstance(usage, dict)

    def _take_usage(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            return
        if isinstance(obj.get("id"), str):
            self.response_id = obj["id"]
        if isinstance(obj.get("model"), str):
            self.response_model = obj["model"]
        reason = _finish_reason(obj)
        if reason is not None:
            self.finish_reason = reason
        usage = answer_usage(obj)
        if usage is not None:
            self.usage = usage
            self.input_tokens = usage.input_tokens
            self.output_tokens = usage.output_tokens
            self.output_counted = True  # an Anthropic message_start's is set right after

    def output_so_far(self) -> int:
        """The answer's output tokens so far: the server's count once whole, else the larger
        of a count given mid-answer and the text's estimate."""
        estimate = tokens_for_chars(self.content_chars)
        if self.output_tokens is None:
            return estimate
        return self.output_tokens if self.output_counted else max(self.output_tokens, estimate)


def usage_from(result: object) -> Usage | None:
    """The usage an SDK's return value carries (an openai ``ChatCompletion`` or ``Response``
    object, or a dict shaped like one: chat's or the Responses API's token names, cached
    tokens included); None when it carries none."""
    usage = result.get("usage") if isinstance(result, dict) else getattr(result, "usage", None)
    if usage is None:
        return None
    if not isinstance(usage, dict):
        dump = getattr(usage, "model_dump", None)  # the SDK's pydantic models
        if callable(dump):
            usage = dump()
        else:
            usage = {
                name: getattr(usage, name, None)
                for name in ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens")
            }
    return parse_usage(usage)


def _loads(body: bytes | str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _content_chars(chunk: dict[str, Any]) -> int:
    """Characters of answer in one stream event (chat and completions deltas, the Responses
    API's ``response.output_text.delta``); a tool call's delta and a reasoning model's
    ``reasoning_content`` count as content too: output, billed as such."""
    delta_text = chunk.get("delta")
    if isinstance(delta_text, str) and str(chunk.get("type", "")).endswith(".delta"):
        return text_chars(delta_text)
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return 0
    choice = choices[0]
    delta = choice.get("delta")
    if isinstance(delta, dict):
        content = delta.get("content")
        size = text_chars(content) if isinstance(content, str) else 0
        size += reasoning_chars(delta)  # a reasoning model's thinking, billed as output
        refusal = delta.get("refusal")  # a structured output's refusal is its answer
        size += text_chars(refusal) if isinstance(refusal, str) else 0
        size += _tool_call_chars(delta.get("tool_calls"))
        return size
    text = choice.get("text")  # a text completion's chunk
    return text_chars(text) if isinstance(text, str) else 0


def _tool_call_chars(deltas: Any) -> int:
    """Characters of the names and arguments in a delta's ``tool_calls``, what ``gate.chat``
    counts (gptgate/wire/stream_choices.py): their whole JSON — ``index``, ``id``, ``type``,
    the keys around a piece of arguments a few characters long — booked 119 output tokens
    for a parallel call that generated 14."""
    chars = 0
    for call in deltas if isinstance(deltas, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            for key in ("name", "arguments"):
                piece = function.get(key)
                chars += text_chars(piece) if isinstance(piece, str) else 0
    return chars


def _finish_reason(obj: dict[str, Any]) -> str | None:
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        reason = choices[0].get("finish_reason")
        return reason if isinstance(reason, str) else None
    stop = obj.get("stop_reason")  # Anthropic's Messages API
    if isinstance(stop, str):
        return FINISH_REASONS.get(stop, stop)
    status = obj.get("status")  # the Responses API: "completed", "incomplete"
    return status if status in _RESPONSES_FINISHED and "output" in obj else None
