"""What one SDK request's tries on ``gate.http_client(primary, fallback=[...])`` tell each
other's spans, so that a failed-over request is one request in its trace.

The failover transport (gptgate/sdk_failover.py) hands every backend's transport the same
request, rewritten; this trail rides in its extensions (copied by the rewrite). Each try's
CLIENT span is numbered after the ones before it, says why the request moved on
(``gptgate.retry_reason``) and links the try before it — and, with no span of the caller's
around it, is that try's child: otherwise each try was the root of a trace of its own, a
failed-over request two unrelated ones, both named attempt 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext

__all__ = ["TRAIL", "FailoverTrail", "trail_of"]

#: the request extension that carries the trail
TRAIL = "gptgate.failover_trail"


@dataclass(slots=True)
class FailoverTrail:
    """The tries of one SDK request so far: how many, the last one's span and failure."""

    tries: int = 0
    last: SpanContext | None = None
    reason: str | None = None

    def before(
        self, number: int, links: Sequence[SpanContext]
    ) -> tuple[int, Sequence[SpanContext], Span | None, dict[str, Any]]:
        """A try's span: its attempt number, links, parent (None: the current span's) and
        extra attributes."""
        if self.last is None:
            return number, links, None, {}
        parent = None
        if not trace.get_current_span().get_span_context().is_valid:
            parent = trace.NonRecordingSpan(self.last)  # the caller's trace is the first try's
        extra = {"gptgate.retry_reason": self.reason} if self.reason else {}
        return number + self.tries, (*links, self.last), parent, extra

    def after(self, span: Span, error: BaseException | None) -> None:
        """A try ended: the next one follows it."""
        self.tries += 1
        context = span.get_span_context()
        self.last = context if context.is_valid else self.last
        self.reason = type(error).__name__ if error is not None else None


def trail_of(extensions: Mapping[str, Any]) -> FailoverTrail | None:
    """The request's trail, if it goes through a failover transport."""
    trail = extensions.get(TRAIL)
    return trail if isinstance(trail, FailoverTrail) else None
