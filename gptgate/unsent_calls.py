"""Calls that fail before any attempt is sent, counted: ``gptgate.client.calls.unsent``.

The GenAI duration histogram is recorded per attempt, so a call that never reached a
backend — its circuit open, shed by the limiter, no eligible backend, refused by the
budget, a body that cannot be encoded — made no metric point at all: with the only backend refusing
connections, 100 failed calls made 8 points (the attempts before its circuit opened), and a
dashboard saw the traffic stop rather than fail. Each such call is one count, labelled by
``error.type``, the backend it was bound for (``gptgate.backend``, a configured name) and
``gptgate.scenario``: bounded series, as the other metrics' are.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import metrics

from .errors import GateError

__all__ = ["UnsentCalls"]

class UnsentCalls:
    """The counter, and its attribute sets built once per (error, backend, scenario)."""

    def __init__(self, meter: metrics.Meter, name: str) -> None:
        self._counter = meter.create_counter(
            name, unit="{call}",
            description="Calls that failed with no attempt sent (an open circuit, shed, "
                        "no backend, budget, unencodable body)",
        )
        self._points: dict[tuple[str, str | None, str], dict[str, Any]] = {}

    def record(self, error: GateError, scenario: str) -> None:
        key = (type(error).__name__, error.backend, scenario)
        point = self._points.get(key)
        if point is None:
            point = {"error.type": key[0], "gptgate.scenario": scenario}
            if error.backend:
                point["gptgate.backend"] = error.backend
            if len(self._points) < 1024:  # a guard, not a limit: the keys are configuration
                self._points[key] = point
        self._counter.add(1, point)
