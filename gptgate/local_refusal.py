"""The response gptgate makes up instead of sending an SDK request (gate.http_client).

A refusal of gptgate's own — the circuit open, the dollar or retry budget spent, a pause past
the request's bound, a guard body waiting on itself — answers as the server would (the
status, a ``retry-after`` where one helps, an OpenAI-shaped error body), tells the SDK not to
retry (``x-should-retry: false``) and says which refusal it is (``REFUSED_HEADER``), so the
gateway counts it as no failure of the backend's. One shape for every such refusal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import httpx2

from .guard import REFUSED_HEADER

__all__ = ["local_refusal"]


def local_refusal(
    request: httpx2.Request,
    status: int,
    *,
    refused: str,
    kind: str,
    message: str,
    retry_after: float | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> httpx2.Response:
    """A ``status`` answer to ``request``, unsent: ``refused`` names the refusal in
    ``REFUSED_HEADER``, ``kind`` is the error body's ``type``."""
    headers = {"x-should-retry": "false", REFUSED_HEADER: refused}
    if retry_after is not None:
        headers["retry-after"] = str(math.ceil(retry_after))
    return httpx2.Response(
        status,
        headers=headers,
        json={"error": {"message": message, "type": kind}},
        request=request,
        extensions=dict(extensions) if extensions else None,
    )
