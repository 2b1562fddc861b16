"""The OpenAI chat-completions wire format: request bodies, responses, streams and errors.

Pure functions and small state machines with no I/O of their own (the stream reader only
iterates the byte stream it is handed), so every server quirk is a unit test away. The rules
that matter most:

* the caller's OpenAI parameters pass through untouched — gptgate never needs to know them;
* the first content token is a stream's commit point: before it a failure maps to a retryable
  error (a retry is invisible), after it to :class:`StreamInterruptedError` carrying the
  partial text (a retry would duplicate output);
* error messages come from the server's error *message* only, truncated and scrubbed of
  anything that looks like a secret; never from headers, URLs or the request.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2

from gptgate.errors import (
    BackendError,
    BadRequestError,
    GateError,
    OutOfFundsError,
    RateLimitedError,
    RequestTimeout,
    RequestTooLargeError,
    StreamInterruptedError,
)
from gptgate.results import Usage
from gptgate.scrub import scrub_known
from gptgate.token_scripts import text_chars
from gptgate.tokens import message_text, tokens_for_chars
from gptgate.wire.aborted import aborted_error, is_aborted
from gptgate.wire.connect_hint import connect_hint
from gptgate.wire.context_window import window_refusal
from gptgate.wire.html_page import html_page_message
from gptgate.wire.openai_messages import openai_messages
from gptgate.wire.out_of_funds import OUT_OF_FUNDS_HINT, out_of_funds
from gptgate.wire.param_refusal import refuses_request
from gptgate.wire.ratelimits import parse_retry_after, parse_should_retry
from gptgate.wire.ratelimits import request_id as _header_request_id
from gptgate.wire.side_output import SideOutput
from gptgate.wire.slot_timings import answer_usage
from gptgate.wire.sse import SSEDecoder, SSEEvent
from gptgate.wire.stream_choices import StreamChoices, merge_tool_calls
from gptgate.wire.stream_start import generates
from gptgate.wire.usage import parse_usage

__all__ = [
    "ChatStreamReader",
    "ParsedChat",
    "StreamAccumulator",
    "build_chat_body",
    "error_for_exception",
    "error_for_status",
    "parse_chat_response",
    "parse_usage",
    "scrub_secrets",
    "too_large",
]

# --------------------------------------------------------------------------------------------
# Request bodies

#: Keys gptgate owns. ``model`` is the backend's (a pool may serve one logical model under
#: different names per backend, so a caller's value would break failover); ``messages`` is
#: the positional argument; ``stream`` is gptgate's stream/non-stream decision.
_OWNED_KEYS = frozenset({"model", "messages", "stream"})


def _json_default(obj: object) -> Any:
    """Let callers pass read-only mappings and tuples-of-anything as messages/params."""
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, Sequence) and not isinstance(obj, str | bytes | bytearray):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


#: NaN and ±inf are refused: ``json`` would write ``NaN``/``Infinity``, which is not JSON
_ENCODER = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_json_default
)


def build_chat_body(
    model: str,
    messages: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any],
    *,
    stream: bool,
    prompt_cache_key: str | None = None,
    include_usage: bool = True,
) -> bytes:
    """The UTF-8 JSON body of one ``/chat/completions`` attempt.

    Every key of ``params`` passes through except the ones gptgate owns (``model``,
    ``messages``, ``stream``). A streamed attempt always asks for ``include_usage`` (merged
    into the caller's ``stream_options``): the usage chunk is how billed tokens are known. A
    non-streamed one carries no ``stream``/``stream_options`` at all — some servers reject
    ``stream_options`` without ``stream: true``. ``include_usage=False``: none at all, for a
    server that refuses the key (stream_usage.py).

    Raises :class:`BadRequestError`, and sends nothing, when ``messages``/``params`` cannot be
    written as UTF-8 JSON: a value ``json`` does not know (an object, a set, bytes), a NaN or
    infinite float, nesting too deep to encode, or a string with a lone surrogate (``"\\ud800"``
    — not Unicode text; escaped, strict servers refuse it and lenient ones fail in the
    tokenizer with a 5xx, which would be retried and counted against the backend's health).
    NUL characters pass: ``\\u0000`` is valid JSON and valid text. The check is the encoding
    this body needs anyway, so a good call pays nothing for it. An Anthropic answer's
    ``thinking_blocks`` are left out of the messages (gptgate/wire/openai_messages.py).
    """
    body: dict[str, Any] = {"model": model, "messages": openai_messages(messages)}
    for key, value in params.items():
        if key not in _OWNED_KEYS:
            body[key] = value
    if stream:
        body["stream"] = True
        options = params.get("stream_options")
        if not include_usage:
            body.pop("stream_options", None)
        else:
            body["stream_options"] = (
                {**options, "include_usage": True}
                if isinstance(options, Mapping)
                else {"include_usage": True}
            )
    elif "stream_options" in body:
        del body["stream_options"]
    if prompt_cache_key is not None and "prompt_cache_key" not in body:
        body["prompt_cache_key"] = prompt_cache_key
    return encode_body(body)


def encode_body(body: Mapping[str, Any]) -> bytes:
    """``body`` as UTF-8 JSON, or :class:`BadRequestError` saying why it cannot be (see
    :func:`build_chat_body`); every dialect's body goes through here."""
    try:
        return _ENCODER.encode(body).encode()
    except UnicodeEncodeError as exc:
        raise BadRequestError(
            f"request is not valid UTF-8 text: a lone surrogate {exc.object[exc.start]!r} "
            "(a str built from broken UTF-16 or surrogateescape'd bytes)"
        ) from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise BadRequestError(f"request is not JSON-serializable: {exc}") from None


# --------------------------------------------------------------------------------------------
# Responses


@dataclass(slots=True)
class ParsedChat:
    """The parts of one chat completion gptgate needs; ``raw`` keeps the rest (tool calls,
    logprobs, server extras) for callers who want it."""

    text: str
    finish_reason: str | None
    usage: Usage | None
    response_id: str | None
    model: str | None
    raw: dict[str, Any] | None


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _loads_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except UnicodeDecodeError:  # byte-level tokens can yield invalid UTF-8: keep the answer
        return json.loads(body.decode("utf-8", "replace"))


def parse_chat_response(
    body: bytes,
    *,
    backend: str,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
) -> ParsedChat:
    """Parse a non-streamed 2xx chat completion (only the first choice's text is taken).

    Raises the mapped error for an ``{"error": ...}`` body sent with a success status, and
    :class:`BackendError` for a body that is not a chat completion.
    """
    obj = load_answer(body, backend=backend, status=status, headers=headers)
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _malformed("response has no choices", backend, status, headers)
    choice = choices[0]
    message = choice.get("message")
    text = ""
    if isinstance(message, dict):
        content = message.get("content")
        text = content if isinstance(content, str) else message_text(message)
    return ParsedChat(
        text=text,
        finish_reason=_optional_str(choice.get("finish_reason")),
        usage=answer_usage(obj),  # llama-server's cache reuse in its timings
        response_id=_optional_str(obj.get("id")),
        model=_optional_str(obj.get("model")),
        raw=obj,
    )


def load_answer(
    body: bytes, *, backend: str, status: int, headers: Mapping[str, str] | None
) -> dict[str, Any]:
    """A 2xx body as a JSON object: :class:`BackendError` when it is not one, the mapped
    error when it carries an ``error`` (any dialect's answer parser starts here)."""
    try:
        obj = _loads_body(body)
    except ValueError:
        what = html_page_message(body) or "response is not JSON"
        raise _malformed(what, backend, status, headers) from None
    if not isinstance(obj, dict):
        raise _malformed("response is not a JSON object", backend, status, headers)
    error = obj.get("error")
    if error:
        raise _in_band_error(error, backend=backend, status=status, headers=headers)
    return obj


def _malformed(
    what: str, backend: str, status: int | None, headers: Mapping[str, str] | None
) -> BackendError:
    return BackendError(
        f"malformed response: {what}",
        backend=backend,
        status=status,
        request_id=_header_request_id(headers) if headers is not None else None,
    )


# --------------------------------------------------------------------------------------------
# Streams


class StreamAccumulator:
    """Folds decoded stream chunks into one answer; :meth:`feed` returns each text delta.

    Tolerates what servers really send: a role-only first chunk with ``content: null``,
    absent or empty content, extra keys (llama.cpp ``timings``), usage on a final chunk with
    ``choices: []``. Choice 0's text is the answer's; tool-call deltas are merged, and the
    other choices of ``n > 1``, ``logprobs`` and a ``refusal`` folded (stream_choices.py),
    all in :meth:`result`'s ``raw`` as a non-streamed answer has them.
    """

    __slots__ = (
        "_backend",
        "_parts",
        "_request_id",
        "_tool_calls",
        "choices",
        "chunks",
        "finish_reason",
        "generating",
        "has_content",
        "model",
        "response_id",
        "side",
        "usage",
    )

    def __init__(self, *, backend: str | None = None, request_id: str | None = None) -> None:
        self._backend = backend
        self._request_id = request_id
        self._parts: list[str] = []
        self._tool_calls: dict[int, dict[str, Any]] | None = None
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.response_id: str | None = None
        self.model: str | None = None
        #: True once a non-empty content delta arrived: the stream's commit point
        self.has_content = False
        #: True once any output arrived — text, a tool call's piece, reasoning (stream_start.py)
        self.generating = False
        self.chunks = 0
        #: output besides the text — reasoning, tool-call pieces (side_output.py)
        self.side = SideOutput()
        #: the other choices of n > 1, logprobs, a refusal (stream_choices.py)
        self.choices = StreamChoices()

    @property
    def counted_usage(self) -> Usage | None:
        """The server's usage once it counts the whole answer (OpenAI's comes after the last
        delta); None before."""
        return self.usage

    def output_tokens(self) -> tuple[int, bool]:
        """(output tokens so far, whether that is the server's own count): its count once
        whole, else the larger of a count given mid-answer and the text's estimate — an
        Anthropic stream's ``message_start`` says 1 however much follows (a stream left after
        two deltas was booked 1 token of the ~6 billed)."""
        counted = self.counted_usage
        if counted is not None:
            return counted.output_tokens, True
        partial = self.usage.output_tokens if self.usage is not None else 0
        chars = text_chars(self.text) + self.side.chars + self.choices.chars
        return max(partial, tokens_for_chars(chars)), False

    @property
    def whole(self) -> bool:
        """Every choice begun has its finish reason (an n > 1 answer: not only choice 0)."""
        return self.finish_reason is not None and not self.choices.unfinished

    @property
    def has_output(self) -> bool:
        """Any output arrived (text, reasoning, a tool call's piece): booked from it."""
        return self.has_content or self.side.chars > 0 or self.choices.chars > 0

    @property
    def text(self) -> str:
        parts = self._parts
        if len(parts) > 1:  # join lazily, once per read of the text, not once per delta
            parts[:] = ["".join(parts)]
        return parts[0] if parts else ""

    def feed(self, chunk: Mapping[str, Any]) -> str:
        """Take one decoded chunk; return its text delta ("" if none). Raises the mapped
        error for an ``{"error": ...}`` chunk."""
        self.chunks += 1
        error = chunk.get("error")
        if error:
            raise _in_band_error(
                error, backend=self._backend, status=None, request_id=self._request_id
            )
        if not self.response_id:  # Azure's prompt-filter chunk comes first, id and model ""
            self.response_id = _optional_str(chunk.get("id")) or None
        if not self.model:
            self.model = _optional_str(chunk.get("model")) or None
        if chunk.get("usage") is not None:
            parsed = answer_usage(chunk)
            if parsed is not None:
                self.usage = parsed
        choices = chunk.get("choices")
        if not choices or not isinstance(choices, list):
            return ""
        text = ""
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            self.choices.feed(choice)
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self.generating = self.generating or generates(delta)
                content = delta.get("content")
                if content and isinstance(content, str):
                    self._parts.append(content)
                    self.has_content = True
                    text = content
                elif self.generating:
                    self.side.reasoning(delta)
                tool_calls = delta.get("tool_calls")
                if tool_calls:
                    self._merge_tool_calls(tool_calls)
            finish_reason = choice.get("finish_reason")
            if finish_reason is not None:
                self.finish_reason = str(finish_reason)
        return text

    def _merge_tool_calls(self, deltas: Any) -> None:
        if self._tool_calls is None:
            self._tool_calls = {}
        self.side.chars += merge_tool_calls(self._tool_calls, deltas)

    def result(self) -> ParsedChat:
        """The answer so far, with ``raw`` shaped like a non-streamed chat completion."""
        text = self.text
        message: dict[str, Any] = {"role": "assistant", "content": text}
        self.side.put_on(message)
        if self._tool_calls:
            message["tool_calls"] = [self._tool_calls[i] for i in sorted(self._tool_calls)]
        raw: dict[str, Any] = {
            "id": self.response_id,
            "object": "chat.completion",
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
        }
        self.choices.put_on(raw["choices"])
        if self.usage is not None:
            raw["usage"] = {
                "prompt_tokens": self.usage.input_tokens,
                "completion_tokens": self.usage.output_tokens,
                "total_tokens": self.usage.total_tokens,
                "prompt_tokens_details": {"cached_tokens": self.usage.cached_input_tokens},
            }
            if self.usage.reasoning_tokens:
                raw["usage"]["completion_tokens_details"] = {
                    "reasoning_tokens": self.usage.reasoning_tokens
                }
        return ParsedChat(
            text=text,
            finish_reason=self.finish_reason,
            usage=self.usage,
            response_id=self.response_id,
            model=self.model,
            raw=raw,
        )


_DONE = "[DONE]"
#: reads of the body after ``[DONE]`` so the connection can go back to the pool
_MAX_DRAIN_READS = 16


class ChatStreamReader:
    """Reads one streamed chat completion: ``async for delta in reader`` yields the non-empty
    text deltas (and one ``""`` when output begins without text: stream_start.py);
    :meth:`result` gives the whole answer once the stream completed.

    A stream is complete at ``[DONE]`` or, for servers that omit it, at EOF after a
    ``finish_reason``. Anything else raises a typed error, decided by the commit point:

    * before the first content delta: a transport failure maps through
      :func:`error_for_exception`, a malformed chunk is a :class:`BackendError`, an error
      event its mapped error — all invisible to the caller, so retryable;
    * after it: :class:`StreamInterruptedError` with the partial text and its (reported or
      estimated) output tokens, chained to the cause.

    An EOF without completion is always :class:`StreamInterruptedError`. Deltas that arrived
    in the same read as a failure are yielded before the error is raised. After ``[DONE]`` the
    rest of the body is drained (errors ignored: the answer is whole) so the connection can be
    reused; the caller still closes the response.
    """

    __slots__ = (
        "_backend",
        "_decoder",
        "_error",
        "_finished",
        "_iterator",
        "_pending",
        "_request_id",
        "_started",
        "_stream",
        "accumulator",
        "complete",
        "done_seen",
    )

    def __init__(
        self,
        byte_stream: AsyncIterable[bytes],
        *,
        backend: str,
        request_id: str | None = None,
    ) -> None:
        self._stream = byte_stream
        self._iterator: AsyncIterator[bytes] | None = None
        self._backend = backend
        self._request_id = request_id
        self._decoder = SSEDecoder()
        self._pending: list[str] = []
        self._error: GateError | None = None
        self._finished = False
        self._started = False
        self.accumulator = StreamAccumulator(backend=backend, request_id=request_id)
        self.done_seen = False
        #: True once the stream ended properly ([DONE], or a finish_reason then EOF)
        self.complete = False

    @property
    def has_content(self) -> bool:
        return self.accumulator.has_content

    def __aiter__(self) -> ChatStreamReader:
        return self

    async def __anext__(self) -> str:
        pending = self._pending
        while True:
            if pending:
                return pending.pop(0)
            if self._error is not None:
                error, self._error = self._error, None
                self._finished = True
                raise error
            if self._finished:
                raise StopAsyncIteration
            if self.done_seen:
                await self._drain()
                self._finish()
                continue
            if self._iterator is None:
                self._iterator = aiter(self._stream)
            try:
                chunk = await self._iterator.__anext__()
            except StopAsyncIteration:
                self._handle(self._decoder.close())
                if self._error is None:
                    if self.done_seen:
                        self._finish()  # nothing left to drain
                    else:
                        self._end_of_stream()
                continue
            except Exception as exc:
                self._fail_transport(exc)
                continue
            self._handle(self._decoder.feed(chunk))

    def result(self) -> ParsedChat:
        """The complete answer. Raises RuntimeError before the stream completed (an
        interrupted stream's partial answer is on its :class:`StreamInterruptedError`)."""
        if not self.complete:
            raise RuntimeError("the stream has not completed")
        return self.accumulator.result()

    async def aclose(self) -> None:
        """Stop early and close the byte iterator (the caller still closes the response)."""
        self._finished = True
        iterator, self._iterator = self._iterator, None
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()

    # -- internals -----------------------------------------------------------------------

    def _handle(self, events: list[SSEEvent]) -> None:
        accumulator = self.accumulator
        for event in events:
            data = event.data
            if event.event == "error":
                self._fail(self._error_event(data))
                return
            if not data:
                continue
            if data == _DONE:
                self.done_seen = True
                return
            try:
                chunk = json.loads(data)
            except ValueError:
                if data.strip() == _DONE:
                    self.done_seen = True
                    return
                self._fail(self._malformed("stream chunk is not JSON"))
                return
            if not isinstance(chunk, dict):
                self._fail(self._malformed("stream chunk is not a JSON object"))
                return
            try:
                delta = accumulator.feed(chunk)
            except GateError as exc:
                self._fail(exc)
                return
            if delta or (accumulator.generating and not self._started):
                self._started = True  # "" once: output began without text (stream_start.py)
                self._pending.append(delta)

    def _error_event(self, data: str) -> GateError:
        try:
            payload: Any = json.loads(data)
        except ValueError:
            payload = data
        if isinstance(payload, dict) and payload.get("error"):
            payload = payload["error"]
        return _in_band_error(
            payload or "error event",
            backend=self._backend,
            status=None,
            request_id=self._request_id,
        )

    def _malformed(self, what: str) -> BackendError:
        return BackendError(
            f"malformed response: {what}",
            backend=self._backend,
            request_id=self._request_id,
            billed=self.accumulator.chunks > 0,
        )

    def _fail(self, error: GateError) -> None:
        """Record a failure, raised once the deltas already decoded were yielded."""
        if self.accumulator.has_content:
            interrupted = self._interrupted(error.message)
            interrupted.__cause__ = error
            error = interrupted
        elif self.accumulator.chunks:
            error.billed = True
            if self.accumulator.has_output:  # reasoning or a tool call's pieces, billed
                error.output_tokens = max(error.output_tokens, self.accumulator.output_tokens()[0])
        self._error = error

    def _fail_transport(self, exc: Exception) -> None:
        if self.accumulator.whole:
            # the answer is whole; only the trailer ([DONE], usage) was lost
            self._finish()
            return
        error = error_for_exception(exc, backend=self._backend)
        if error.request_id is None:
            error.request_id = self._request_id
        if error is not exc:
            error.__cause__ = exc
        self._fail(error)

    def _end_of_stream(self) -> None:
        if self.accumulator.whole:
            self._finish()
            return
        reason = "the stream was cut mid-event" if self._decoder.truncated else "no [DONE]"
        self._error = self._interrupted(f"stream ended before its final chunk ({reason})")

    def _finish(self) -> None:
        if is_aborted(self.accumulator.finish_reason):  # the server cut it: aborted.py
            self._fail(aborted_error(self._backend, self.accumulator.usage, self._request_id,
                                     finish_reason=self.accumulator.finish_reason))
            return
        self.complete = True
        self._finished = True

    async def _drain(self) -> None:
        iterator = self._iterator
        if iterator is None:
            return
        try:
            for _ in range(_MAX_DRAIN_READS):
                await iterator.__anext__()
        except Exception:  # includes StopAsyncIteration: the body ended
            pass

    def _interrupted(self, reason: str) -> StreamInterruptedError:
        accumulator = self.accumulator
        text = accumulator.text
        output, counted = accumulator.output_tokens()
        return StreamInterruptedError(
            f"stream interrupted after {len(text)} characters: {reason}",
            partial_text=text,
            output_tokens=output,
            usage_estimated=not counted,
            usage_so_far=accumulator.usage,
            backend=self._backend,
            request_id=self._request_id,
            billed=accumulator.chunks > 0 or bool(text),
        )


# --------------------------------------------------------------------------------------------
# Errors

_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bBearer\s+[^\s\"',;]+", re.IGNORECASE), "Bearer ***"),
    (re.compile(r"\bsk-[A-Za-z0-9_\-*]{4,}"), "sk-***"),
    (
        re.compile(
            r"(?i)\b((?:x-)?api[_-]?key|access[_-]?token|auth[_-]?token|secret|password"
            r"|authorization)([\"']?\s*[:=]\s*[\"']?)[^\s\"'&,;}]+"
        ),
        r"\1\2***",
    ),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{20,}"), "AIza***"),
    (re.compile(r"\b(?:ghp|gho|ghs|ghu|github_pat|hf|xai|gsk)_[A-Za-z0-9_]{16,}"), "***"),
    (re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"), "***"),
)
_MAX_MESSAGE = 500


def scrub_secrets(text: str) -> str:
    """Mask what looks like a credential (``sk-…`` keys, ``Bearer …``, ``api_key=…``, a few
    other providers' token shapes) — servers echo keys in error messages, and errors end up
    in logs and spans. The exact secrets the gateway sends go first, whatever their shape
    (and before a pattern could cut one in two)."""
    text = scrub_known(text)
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _clean(text: str, limit: int = _MAX_MESSAGE) -> str:
    # scrub before truncating (a cut could hide a key's prefix from the patterns), but bound
    # the scrubbed text so a megabyte error page costs nothing
    text = scrub_secrets(" ".join(text[: limit * 4].split()))
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def _describe(payload: Any) -> tuple[str, Any, Any]:
    """(message, code, type) of an error payload: an OpenAI ``error`` object, a string, or a
    FastAPI/vLLM ``detail``/``message`` body."""
    if isinstance(payload, str):
        return payload, None, None
    if not isinstance(payload, dict):
        return json.dumps(payload, default=str), None, None
    inner = payload.get("error")
    if isinstance(inner, dict):
        payload = inner
    elif isinstance(inner, str) and inner:
        return inner, payload.get("code"), payload.get("type")
    code, kind = payload.get("code"), payload.get("type")
    for key in ("message", "detail", "msg"):
        value = payload.get(key)
        if value:
            return (value if isinstance(value, str) else json.dumps(value, default=str)), code, kind
    return json.dumps(payload, default=str), code, kind


def _body_message(body: bytes) -> tuple[str, Any, Any]:
    stripped = body.lstrip()
    if stripped[:1] in (b"{", b"["):
        try:
            return _describe(_loads_body(stripped))
        except ValueError:
            pass
    page = html_page_message(body)  # a proxy's page: its title (html_page.py)
    if page is not None:
        return page, None, None
    return body[:200].decode("utf-8", "replace"), None, None


def _class_for_status(status: int) -> type[GateError]:
    if status == 429:
        return RateLimitedError
    if status == 408:
        return RequestTimeout
    if 400 <= status < 500 and status != 409:
        return BadRequestError
    return BackendError  # 409 conflict, 5xx, and anything unexpected


_LEAD = {
    RateLimitedError: "rate limited",
    RequestTimeout: "request timed out",
    BadRequestError: "bad request",
    BackendError: "backend error",
    RequestTooLargeError: "request too large",
    OutOfFundsError: "out of funds",
}

#: "Limit 10000, Requested 15009" in a 429's message (OpenAI, Groq, Together, …); a number
#: may carry thousands separators, a label a colon ("Limit: 6,000")
_LIMIT = re.compile(r"\blimit\b\s*[:=]?\s*(\d[\d,_]*)", re.IGNORECASE)
_REQUESTED = re.compile(r"\brequested\b\s*[:=]?\s*(\d[\d,_]*)", re.IGNORECASE)


def _first_number(pattern: re.Pattern[str], text: str) -> int | None:
    match = pattern.search(text)
    if match is None:
        return None
    digits = match.group(1).replace(",", "").replace("_", "")
    return int(digits) if digits else None


def too_large(text: str) -> tuple[int, int] | None:
    """(limit, requested) when a rate-limit message says one request asks for more than the
    whole budget — OpenAI's "Request too large … Limit 10000, Requested 15009" — else None.
    An ordinary 429 ("Limit 10000, Used 9000, Requested 2000") asks for less than the limit:
    it fits once the budget refills, so it stays a retryable RateLimitedError."""
    limit = _first_number(_LIMIT, text)
    requested = _first_number(_REQUESTED, text)
    if limit is None or requested is None or requested <= limit:
        return None
    return limit, requested


def _too_large_error(
    text: str,
    code: Any,
    kind: Any,
    *,
    backend: str | None,
    status: int | None,
    request_id: str | None,
) -> RequestTooLargeError | None:
    """The typed error for a 429 that can never succeed: not retryable (whatever
    ``x-should-retry`` says) and without a retry-after, so that no one waits for it."""
    sizes = too_large(text)
    if sizes is None:
        return None
    return RequestTooLargeError(
        _message(RequestTooLargeError, None, text, code, kind),
        backend=backend,
        status=status,
        request_id=request_id,
        should_retry=False,
        limit=sizes[0],
        requested=sizes[1],
    )


def _message(cls: type[GateError], status: int | None, text: str, code: Any, kind: Any) -> str:
    if status == 401:
        lead = "authentication failed"
    elif status == 403:
        lead = "permission denied"
    elif status == 409:
        lead = "conflict"
    else:
        lead = _LEAD.get(cls, "error")
    tag = code if isinstance(code, str) and code else kind if isinstance(kind, str) else None
    if tag:
        lead = f"{lead}: [{_clean(tag, 80)}]"
    text = _clean(text, _MAX_MESSAGE - len(lead) - 2)  # the whole message stays <= 500 chars
    return f"{lead} {text}" if tag and text else f"{lead}: {text}" if text else lead


def error_for_status(
    status: int,
    headers: Mapping[str, str] | None,
    body: bytes,
    *,
    backend: str,
) -> GateError:
    """The typed error for a non-2xx response: 408 → RequestTimeout, 409 → BackendError,
    429 → RateLimitedError (RequestTooLargeError when its message says the request exceeds
    the whole limit), 5xx → BackendError, other 4xx → BadRequestError; an account out of
    funds or quota, whatever its status, → OutOfFundsError (out_of_funds.py).

    Carries the status, the server's request id, ``retry-after`` and ``x-should-retry`` (which
    overrides the class's own ``retryable``); the message is the server's, scrubbed.
    """
    text, code, kind = _body_message(body)
    cls = BadRequestError if refuses_request(status, text) else _class_for_status(status)
    rid = _header_request_id(headers) if headers is not None else None
    if out_of_funds(status, text, code, kind):  # the account's, not the call's
        return OutOfFundsError(f"{_message(OutOfFundsError, status, text[:300], code, kind)}; "
                               f"{OUT_OF_FUNDS_HINT}", backend=backend, status=status,
                               request_id=rid)
    if cls is RateLimitedError:
        error = _too_large_error(text, code, kind, backend=backend, status=status, request_id=rid)
        if error is not None:
            return error
    too_long = window_refusal(body, text, code, kind, status, cls is BadRequestError,
                              lambda: _message(RequestTooLargeError, status, text, code, kind))
    if too_long is not None:  # the server's own "cannot fit": as gptgate's check says it
        too_long.backend, too_long.request_id = backend, rid
        return too_long
    return cls(
        _message(cls, status, text, code, kind),
        backend=backend,
        status=status,
        request_id=rid,
        retry_after=parse_retry_after(headers) if headers is not None else None,
        should_retry=parse_should_retry(headers) if headers is not None else None,
    )


_RATE_LIMIT_MARKERS = ("rate_limit", "rate limit", "ratelimit", "too_many_requests", "429")


def _in_band_error(
    payload: Any,
    *,
    backend: str | None,
    status: int | None,
    headers: Mapping[str, str] | None = None,
    request_id: str | None = None,
) -> GateError:
    """The error for an ``{"error": ...}`` sent under a success status or in a stream.

    Rate-limit-ish codes/types → RateLimitedError; an HTTP-like numeric ``code`` (llama.cpp,
    vLLM) picks the class as its status would; anything else → BackendError. ``status`` stays
    the real HTTP status.
    """
    text, code, kind = _describe(payload)
    marker = f"{code} {kind}".lower()
    numeric = code if type(code) is int else None
    if numeric is None and isinstance(code, str) and code.isdigit():
        numeric = int(code)
    cls: type[GateError]
    if any(m in marker for m in _RATE_LIMIT_MARKERS):
        cls = RateLimitedError
    elif numeric is not None and 400 <= numeric < 600:
        cls = BadRequestError if refuses_request(numeric, text) else _class_for_status(numeric)
    else:
        cls = BackendError
    if headers is not None and request_id is None:
        request_id = _header_request_id(headers)
    said = numeric if status is None else status  # streamed: the status its code names
    too_long = window_refusal(json.dumps(payload, default=str).encode(), text, code, kind, said,
                              cls is BadRequestError,
                              lambda: _message(RequestTooLargeError, said, text, code, kind))
    if too_long is not None:  # as its HTTP 400 is
        too_long.backend, too_long.request_id = backend, request_id
        return too_long
    if cls is RateLimitedError:
        error = _too_large_error(
            text, code, kind, backend=backend, status=status, request_id=request_id
        )
        if error is not None:
            return error
    return cls(
        _message(cls, numeric, text, code, kind),
        backend=backend,
        status=status,
        request_id=request_id,
        retry_after=parse_retry_after(headers) if headers is not None else None,
        should_retry=parse_should_retry(headers) if headers is not None else None,
    )


def error_for_exception(exc: BaseException, *, backend: str) -> GateError:
    """The typed error for an exception raised while sending or reading a request.

    The message is the exception's class and a short reason, never ``str(exc)``: transport
    exceptions can carry the request URL. Chain the original (``raise ... from exc``) to keep
    the details for debugging.
    """
    if isinstance(exc, GateError):
        if exc.backend is None:
            exc.backend = backend
        return exc
    name = type(exc).__name__
    if isinstance(exc, httpx2.TimeoutException):
        if isinstance(exc, httpx2.ConnectTimeout):
            return RequestTimeout(f"connect timeout ({name})", backend=backend, unsent=True)
        if isinstance(exc, httpx2.PoolTimeout):
            return RequestTimeout(
                f"timed out waiting for a pooled connection ({name})", backend=backend, unsent=True
            )
        if isinstance(exc, httpx2.ReadTimeout):
            # the prompt was sent: the backend may be working (and billing) on it
            return RequestTimeout(f"read timeout ({name})", backend=backend, billed=True)
        if isinstance(exc, httpx2.WriteTimeout):
            return RequestTimeout(f"write timeout ({name})", backend=backend)
        return RequestTimeout(f"timeout ({name})", backend=backend)
    if isinstance(exc, httpx2.ConnectError):
        return BackendError(
            f"connection failed ({name}): {connect_hint(exc)}", backend=backend, unsent=True
        )
    if isinstance(exc, httpx2.ProtocolError):
        return BackendError(f"protocol error ({name})", backend=backend)
    if isinstance(exc, httpx2.ReadError):
        return BackendError(f"connection lost while reading ({name})", backend=backend)
    if isinstance(exc, httpx2.WriteError):
        return BackendError(f"connection lost while writing ({name})", backend=backend)
    if isinstance(exc, httpx2.TransportError):
        return BackendError(f"transport error ({name})", backend=backend)
    if isinstance(exc, anyio.EndOfStream | anyio.BrokenResourceError | anyio.ClosedResourceError):
        return BackendError(f"connection closed ({name})", backend=backend)
    if isinstance(exc, TimeoutError):
        return RequestTimeout(f"timeout ({name})", backend=backend)
    return BackendError(f"request failed ({name})", backend=backend)
