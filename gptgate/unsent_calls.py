"""Calls that fail before any attempt is sent, counted: ``gptgate.client.calls.unsent``.

The GenAI duration histogram is recorded per attempt, so a call that never reached a
backend — its circuit open, shed by the limiter, no eligible backend, refused by the
budget, a body that cannot be encoded — made no metric point at all: with the only backend refusing
connections, 100 failed calls made 8 points (the attempts before its circuit opened), and a
dashboard saw the traffic stop rather than fail. Each such call is one count, labelled by
``error.type``, the backend it was bound for (``gptgate.backend``, a configured name) and
``gptgate.scenario``: bounded series, as the other metrics' are.

An SDK request on ``gate.http_client`` that gptgate refused unsent — a response made up in
its place (gptgate/local_refusal.py) — is counted alike (:meth:`UnsentCalls.record_refusal`),
under the ``error.type`` ``gate.chat`` raises for the same refusal.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import metrics

from .errors import GateError

__all__ = ["REFUSAL_ERRORS", "UnsentCalls"]

#: a local refusal's kind (its ``x-gptgate-refused`` header) → the error ``gate.chat`` raises
#: for it. Not here: an SDK's retry the retry budget refused (its call's first request was
#: sent), a guarded body's request (its guard answers for the call)
REFUSAL_ERRORS = {
    "circuit-open": "CircuitOpenError",
    "dollar-budget": "BudgetExceededError",
    "paused": "RateLimitedError",
}

class UnsentCalls:
    """The counter, and its attribute sets built once per (error, backend, scenario)."""

    def __init__(self, meter: metrics.Meter, name: str) -> None:
        self._counter = meter.create_counter(
            name, unit="{call}",
            description="Calls that failed with no attempt sent (an open circuit, shed, "
                        "no backend, budget, unencodable body)",
        )
        self._points: dict[tuple[str, str | None, str | None], dict[str, Any]] = {}

    def record(self, error: GateError, scenario: str) -> None:
        self._add(type(error).__name__, error.backend, scenario)

    def record_refusal(self, refused: str, backend: str, scenario: str | None) -> None:
        """An SDK request answered by a local refusal of kind ``refused``, unsent."""
        error_type = REFUSAL_ERRORS.get(refused)
        if error_type is not None:
            self._add(error_type, backend, scenario)

    def _add(self, error_type: str, backend: str | None, scenario: str | None) -> None:
        key = (error_type, backend, scenario)
        point = self._points.get(key)
        if point is None:
            point = {"error.type": error_type}
            if scenario is not None:
                point["gptgate.scenario"] = scenario
            if backend:
                point["gptgate.backend"] = backend
            if len(self._points) < 1024:  # a guard, not a limit: the keys are configuration
                self._points[key] = point
        self._counter.add(1, point)
