"""How long gptgate reads an SDK response's body on ``gate.http_client`` (gptgate/sdk_client.py).

httpx's read timeout bounds each read only, so a server trickling bytes faster than it — SSE
keep-alive comments after a stream's last event, whitespace after the start of a JSON body —
held the request and its permit for as long as it went on (over 60 s past ``Backend(timeout=3)``
and ``deadline_s=60`` on the simulator's ``endless`` fault). The bounds, never sooner than the
timeouts a user set would end the request:

* the gateway's deadline (the scenario's ``deadline_s``, else ``GatewayConfig.deadline_s``),
  counted from when the SDK asked: the call's total time, as for ``gate.chat``;
* a JSON body: the later of the backend's ``timeout`` and the SDK's own (its read timeout, real
  seconds), counted from the send — an answer generated whole before it is sent, and the SDK's
  ``timeout`` is what its user reads as the request's;
* a stream: no total beyond the deadline (a long answer streams for as long as it takes: an
  Anthropic stream of 64k tokens runs past the SDK's default 10 minutes), but no longer without
  an event than the latest of the backend's ``idle_timeout`` and ``timeout`` and the SDK's read
  timeout: comments are no progress, yet a proxy's comments while its upstream thinks before
  the first token (OpenRouter's) keep it going as long as any of those timeouts allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .clock import from_real

if TYPE_CHECKING:
    import httpx2

    from .clock import Clock
    from .config import Backend

__all__ = ["BodyBound", "body_bound"]


@dataclass(frozen=True, slots=True)
class BodyBound:
    """``cut_at``: no read past this clock reading (None: none); ``quiet_s``: no longer than
    this without an event (streams; None: unbounded)."""

    cut_at: float | None
    quiet_s: float | None


def body_bound(
    clock: Clock, backend: Backend, request: httpx2.Request, *, asked: float, sent: float,
    deadline_s: float | None, streamed: bool,
) -> BodyBound:
    timeouts = request.extensions.get("timeout")
    read = timeouts.get("read") if isinstance(timeouts, Mapping) else None
    sdk_s = from_real(clock, read) if isinstance(read, (int, float)) else 0.0
    ends = [asked + deadline_s] if deadline_s else []
    if streamed:
        quiet_s = max(backend.idle_timeout, backend.timeout, sdk_s)
        return BodyBound(min(ends, default=None), quiet_s)
    ends.append(sent + max(backend.timeout, sdk_s))
    return BodyBound(min(ends), None)
