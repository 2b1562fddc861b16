"""The ``"anthropic"`` dialect: Anthropic's native Messages API behind the dialect seam.

Why native and not Anthropic's OpenAI-compatible endpoint: that one is "not production-ready"
in Anthropic's own words, ignores ``response_format`` and ``logprobs`` without a word, and has
no prompt caching. Here:

* ``base_url`` is the server root, as the anthropic SDK takes it (default
  ``https://api.anthropic.com``); requests go to ``{base_url}/v1/messages`` (a ``base_url``
  already ending in ``/v1`` is taken as meant), the key in ``x-api-key``, with
  ``anthropic-version``;
* requests and answers are mapped to and from OpenAI's shapes (anthropic_messages.py,
  anthropic_stream.py); ``max_tokens`` defaults to ``Backend.max_output_tokens``, else
  :data:`DEFAULT_MAX_TOKENS`;
* the prompt cache works only at ``cache_control`` markers: one goes at the end of the prefix
  the cache gate groups calls on (:func:`gptgate.cache.prefix_end`), when that prefix reaches
  the model's minimum cacheable length and the request has fewer than 4 markers;
* usage is read with cache reads and writes *added* to ``input_tokens``
  (:func:`~gptgate.wire.usage.parse_anthropic_usage`);
* ``anthropic-ratelimit-*`` headers feed the pacer: ``-reset`` is an RFC 3339 instant, turned
  into seconds from now; ``input-tokens`` and ``output-tokens`` are two budgets, paced apart
  (a call's prompt against the first, its ``max_tokens`` against the second, cache reads
  against neither: limits/pacing.py).
  A 529 ``overloaded_error`` is a congestion signal like a 503; it comes without
  ``retry-after``, so it gets :data:`OVERLOAD_WAIT_S` and is requeued as a refusal — and so
  is the same overload sent as a stream's ``error`` event before its first token
  (anthropic_overload.py).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import httpx2

from gptgate.cache import prefix_end
from gptgate.errors import BadRequestError, GateError
from gptgate.wire.anthropic_messages import DEFAULT_MAX_TOKENS, to_messages_request, unsupported
from gptgate.wire.anthropic_models import check_claude_model
from gptgate.wire.anthropic_overload import OVERLOAD_WAIT_S, overload_as_529
from gptgate.wire.anthropic_stream import MessagesStreamReader, parse_message
from gptgate.wire.anthropic_thinking import (
    INTERLEAVED_BETA,
    budget_refused,
    foreign_tool_turn,
    refused_with_thinking,
    thinking_budget,
)
from gptgate.wire.openai import ChatStreamReader, encode_body, error_for_status
from gptgate.wire.ratelimits import RateLimitInfo, _count, _ratelimit_headers
from gptgate.wire.usage import parse_anthropic_usage

if TYPE_CHECKING:
    from gptgate.config import Backend
    from gptgate.providers import Provider

__all__ = [
    "ANTHROPIC_VERSION",
    "DEFAULT_MAX_TOKENS",
    "AnthropicDialect",
    "min_cacheable_tokens",
    "parse_anthropic_rate_limits",
]

#: the ``anthropic-version`` header every request carries (the API's stable version)
ANTHROPIC_VERSION = "2023-06-01"

#: a prompt prefix shorter than this is never cached (Anthropic's prompt-caching docs:
#: "4,096 tokens for Claude Opus 4.7, Claude Opus 4.6, and Claude Opus 4.5", and Haiku 4.5);
#: first match by model-name fragment wins, 1,024 otherwise (Sonnet, Opus 4/4.1, 4.8)
_MIN_CACHEABLE = (
    ("opus-4-5", 4096), ("opus-4-6", 4096), ("opus-4-7", 4096), ("haiku-4-5", 4096),
    ("haiku", 2048),
)


def min_cacheable_tokens(model: str) -> int:
    """The shortest prefix ``model`` caches, in tokens."""
    name = model.lower().replace(".", "-")
    for fragment, tokens in _MIN_CACHEABLE:
        if fragment in name:
            return tokens
    return 1024


def _reset_s(value: str | None, now: float) -> float | None:
    """Seconds from ``now`` (epoch) to an RFC 3339 instant; 0 when it has passed."""
    if not value:
        return None
    try:
        instant = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if instant.tzinfo is None:
        return None
    return max(0.0, instant.timestamp() - now)


def parse_anthropic_rate_limits(
    headers: Mapping[str, str], *, now: float | None = None
) -> RateLimitInfo | None:
    """The budget in ``anthropic-ratelimit-*`` headers, or None when there are none.

    Anthropic budgets input and output tokens apart (``input-tokens``, ITPM, which cache
    reads do not count; ``output-tokens``, OTPM): they become the input budget
    (``*_tokens``) and the output one (``*_output_tokens``). ``tokens`` is only "the most
    restrictive limit currently in effect" — now the one, now the other — so it stands in
    for the token budget only on a response without the two."""
    prefix = "anthropic-ratelimit-"
    get = (_ratelimit_headers(headers, prefix.encode()).get
           if isinstance(headers, httpx2.Headers) else headers.get)
    families = ("requests", "tokens", "input-tokens", "output-tokens")
    if all(get(f"{prefix}{f}-remaining") is None for f in families):
        return None
    now = time.time() if now is None else now

    def family(name: str) -> tuple[int | None, int | None, float | None]:
        return (_count(get(f"{prefix}{name}-limit")), _count(get(f"{prefix}{name}-remaining")),
                _reset_s(get(f"{prefix}{name}-reset"), now))

    apart = any(get(f"{prefix}{f}-remaining") is not None for f in families[2:])
    tokens = family("input-tokens") if apart else family("tokens")
    outputs = family("output-tokens")
    return RateLimitInfo(
        *family("requests"),
        limit_tokens=tokens[0], remaining_tokens=tokens[1], reset_tokens_s=tokens[2],
        limit_output_tokens=outputs[0], remaining_output_tokens=outputs[1],
        reset_output_tokens_s=outputs[2],
    )


class AnthropicDialect:
    """The Messages API (see the module docstring)."""

    name = "anthropic"
    #: Anthropic states its budget in every response's headers (continuously refilled
    #: buckets, no 1 s / 10 s windows as on Azure): the pacer reads them, not the 429s
    spaced_after_429 = False

    def __init__(self, backend: Backend, preset: Provider) -> None:
        self.provider = preset.name
        self.backend = backend.name
        self.max_tokens = backend.max_output_tokens or DEFAULT_MAX_TOKENS
        #: the backend states its output cap: that is every call's default, thinking or not
        self.capped = backend.max_output_tokens is not None
        self.min_cacheable = min_cacheable_tokens(backend.model)
        #: a Backend(headers={"anthropic-version": ...}) of the caller's wins
        self.version = next(
            (v for k, v in backend.headers.items() if k.lower() == "anthropic-version"),
            ANTHROPIC_VERSION,
        )
        #: the backend's ``anthropic-beta`` asks for interleaved thinking: a budget may
        #: exceed ``max_tokens`` then
        self.interleaved = any(
            k.lower() == "anthropic-beta" and INTERLEAVED_BETA in v
            for k, v in backend.headers.items()
        )

    parse_response = staticmethod(parse_message)
    #: an SDK's stream (``gate.http_client``) overloaded before its first token: its 529
    stream_refusal = staticmethod(overload_as_529)
    parse_usage = staticmethod(parse_anthropic_usage)
    @staticmethod
    def error_for_status(
        status: int, headers: Mapping[str, str] | None, body: bytes, *, backend: str
    ) -> GateError:
        """OpenAI's mapping, but a 529 that names no wait gets :data:`OVERLOAD_WAIT_S`: the
        overload is shedding before any work, by definition, so it is requeued as a refusal
        (gptgate/shed.py) rather than spending the retry budget a storm of it would drain."""
        error = error_for_status(status, headers, body, backend=backend)
        if status == 529 and error.retry_after is None:
            error.retry_after = OVERLOAD_WAIT_S
        return error

    def rate_limits(self, headers: Mapping[str, str]) -> RateLimitInfo | None:
        return parse_anthropic_rate_limits(headers)

    def chat_url(self, base: httpx2.URL) -> httpx2.URL:
        path = base.raw_path
        suffix = b"messages" if path.endswith(b"/v1/") else b"v1/messages"
        return base.copy_with(raw_path=path + suffix)

    def auth_headers(self, key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": self.version}
        if key:
            headers["x-api-key"] = key
        return headers

    def auth(self) -> httpx2.Auth | None:
        return None

    def check_params(self, params: Mapping[str, Any]) -> None:
        for param, value in params.items():
            why = unsupported(param, value)
            if why is not None:
                raise BadRequestError(
                    f"bad request: provider 'anthropic' {why} the parameter {param!r}; "
                    f"nothing was sent (to send it anyway: extra_body={{{param!r}: ...}})",
                    backend=self.backend,
                )
        extra = params.get("extra_body")
        if extra is not None and not isinstance(extra, Mapping):
            raise BadRequestError("extra_body must be a mapping of body keys to values")
        refused = refused_with_thinking(params)
        if refused is not None:
            param, why = refused
            raise BadRequestError(
                f"bad request: provider 'anthropic' refuses the parameter {param!r} with "
                f"extended thinking ({why}); nothing was sent",
                backend=self.backend,
            )

    def check_call(self, model: str, params: Mapping[str, Any]) -> None:
        self.check_params(params)
        check_claude_model(model, params, self.backend)
        why = budget_refused(params, self.sent_max_tokens(params), interleaved=self.interleaved)
        if why is not None:
            raise BadRequestError(
                f"bad request: provider 'anthropic' refuses the parameter 'thinking' for "
                f"model {model!r}: {why}; nothing was sent", backend=self.backend,
            )

    def sent_max_tokens(self, params: Mapping[str, Any]) -> int:
        """The ``max_tokens`` the request carries: the call's, else the default."""
        for key in ("max_completion_tokens", "max_tokens"):
            given = params.get(key)
            if isinstance(given, int) and not isinstance(given, bool):
                return given
        return self.default_max_tokens(params)

    def build_body(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        params: Mapping[str, Any],
        *,
        stream: bool,
        prompt_cache_key: str | None = None,
    ) -> bytes:
        self.check_call(model, params)
        if "thinking" in params and foreign_tool_turn(messages):
            params = {k: v for k, v in params.items() if k != "thinking"}
        body = to_messages_request(
            model, messages, params, self.default_max_tokens(params),
            mark_after=prefix_end(messages, self.min_cacheable),
        )
        if stream:
            body["stream"] = True
        return encode_body(body)

    def default_max_tokens(self, params: Mapping[str, Any]) -> int:
        """``max_tokens`` for a call that gives none: the backend's cap, else
        :data:`DEFAULT_MAX_TOKENS` — after the thinking budget, which ``max_tokens`` counts
        (a budget of 4,096 or more under the plain default was a 400)."""
        budget = thinking_budget(params)
        if budget is None or self.capped:
            return self.max_tokens
        return budget + DEFAULT_MAX_TOKENS

    def stream_reader(
        self, chunks: AsyncIterable[bytes], *, backend: str, request_id: str | None
    ) -> ChatStreamReader:
        return MessagesStreamReader(chunks, backend=backend, request_id=request_id)
