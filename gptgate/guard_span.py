"""The INTERNAL span of one ``@gate.guard`` call: what an SRE's trace view shows for a call
site gptgate did not write.

Named ``"guard {function}"`` (the guard knows the call site, not the operation); it carries
the scenario, the backend of the last try, the number of tries, the outcome, and the cost.
The CLIENT spans of the requests its body sends through ``gate.http_client`` are its
children and carry their usage (``gen_ai.usage.*``); only a body whose requests gptgate did
not see (the SDK's own client) has its return value's usage here — on one span, never two:
an LLM-observability tool sums ``gen_ai.usage.*`` over a trace's spans.
Nothing is built when no tracer provider is configured.
"""

from __future__ import annotations

from typing import Any, Literal

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from .results import Usage
from .telemetry import NAMES, Telemetry, usage_attributes

__all__ = ["GuardSpan", "Outcome"]

Outcome = Literal["ok", "error", "cancelled"]


class GuardSpan:
    """Start at the guarded call's start, end exactly once with its outcome."""

    __slots__ = ("_ended", "backend", "span", "tries", "wired")

    def __init__(self, telemetry: Telemetry, function: str, scenario: str) -> None:
        self._ended = False
        self.backend: str | None = None
        self.tries = 0
        #: its body's requests went through ``gate.http_client``: their spans have the usage
        self.wired = False
        if not telemetry.tracing:
            self.span: Span = trace.INVALID_SPAN
            return
        self.span = telemetry.tracer.start_span(
            f"guard {function}",
            kind=SpanKind.INTERNAL,
            attributes={NAMES["scenario"]: scenario, NAMES["guard_function"]: function},
        )

    def end(
        self,
        outcome: Outcome,
        *,
        usage: Usage | None = None,
        cost_usd: float | None = None,
        error: BaseException | None = None,
    ) -> None:
        if self._ended:
            return
        self._ended = True
        span = self.span
        if span.is_recording():
            attributes: dict[str, Any] = {NAMES["outcome"]: outcome, NAMES["attempt"]: self.tries}
            if self.backend is not None:
                attributes[NAMES["backend"]] = self.backend
            if usage is not None and not self.wired:
                attributes.update(usage_attributes(usage))
            if cost_usd is not None:
                attributes[NAMES["cost_usd"]] = cost_usd
            if error is not None:
                attributes[NAMES["error_type"]] = type(error).__name__
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            span.set_attributes(attributes)
        span.end()
