"""The OpenAI-compatible wire: request bodies, responses, SSE streams, headers and errors.

No I/O lives here; the gateway hands in bytes and headers and gets typed values or errors.
"""

from gptgate.wire.dialect import DIALECTS, Dialect, OpenAIDialect, dialect_for
from gptgate.wire.openai import (
    ChatStreamReader,
    ParsedChat,
    StreamAccumulator,
    build_chat_body,
    error_for_exception,
    error_for_status,
    parse_chat_response,
    parse_usage,
    scrub_secrets,
)
from gptgate.wire.ratelimits import (
    RateLimitInfo,
    parse_duration,
    parse_rate_limits,
    parse_retry_after,
    parse_should_retry,
    request_id,
)
from gptgate.wire.sse import SSEDecoder, SSEEvent

__all__ = [
    "DIALECTS",
    "ChatStreamReader",
    "Dialect",
    "OpenAIDialect",
    "ParsedChat",
    "RateLimitInfo",
    "SSEDecoder",
    "SSEEvent",
    "StreamAccumulator",
    "build_chat_body",
    "dialect_for",
    "error_for_exception",
    "error_for_status",
    "parse_chat_response",
    "parse_duration",
    "parse_rate_limits",
    "parse_retry_after",
    "parse_should_retry",
    "parse_usage",
    "request_id",
    "scrub_secrets",
]
