"""One call span over a call run more than once: a ``tier="auto"`` call whose small answer is
asked again of the large tier (gptgate/tiers.py) is still one call in its trace.

Each run of ``CallRunner.run`` adopts the span instead of starting its own: its attempts are
the span's children, its tier attributes the latest run's (so the span ends saying
``tier=large``, ``escalated``), and its cost adds up. Whoever opened the span ends it once,
with the call's outcome — an escalation that failed while the small answer was kept is no
failed call.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Span

from .call_outcome import ended_call
from .errors import GateError

if TYPE_CHECKING:
    from .calls import CallRunner, CallSpec, CallState

__all__ = ["SharedCallSpan", "shared_call_span"]


@dataclass(slots=True)
class SharedCallSpan:
    """The span the runs of one call share, and what they have added to it."""

    span: Span
    #: named after a model yet (the caller's, or the first routed backend's)
    named: bool
    cost_usd: float = 0.0

    def adopt(self, state: CallState, tier_attributes: Mapping[str, Any] | None) -> Span:
        """A run starts: it parents its attempts to the shared span."""
        state.span, state.named = self.span, self.named
        if tier_attributes and self.span.is_recording():
            self.span.set_attributes(tier_attributes)
        return self.span

    def ran(self, state: CallState) -> None:
        """A run ended, whatever its outcome: its cost is the call's."""
        self.cost_usd += state.cost_usd
        self.named = state.named


@contextmanager
def shared_call_span(runner: CallRunner, spec: CallSpec) -> Iterator[SharedCallSpan]:
    """The call's span, current while the block runs its runs, ended once with the outcome
    (a ``GateError`` out of the block, or the gateway's shutdown, fails it)."""
    shared = runner.open_call_span(spec)

    def end(failure: GateError | None) -> None:
        runner.telemetry.end_call(shared.span, error=failure, cost_usd=shared.cost_usd)

    with ended_call(runner.shutdown_error, end), runner.telemetry.use_call(shared.span):
        yield shared
