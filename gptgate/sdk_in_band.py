"""An answer that says it failed, on ``gate.http_client`` (gptgate/sdk_client.py).

A server can fail a request after its 200: an ``{"error": ...}`` chunk in a chat stream (vLLM,
llama.cpp, OpenRouter's upstream failures), an ``{"error": ...}`` body under the 200, the
Responses API's ``response.failed`` and ``error`` events (and a ``Response`` whose ``status``
is ``"failed"``), Anthropic's ``error`` event. ``gate.chat`` raises the mapped error for each
(gptgate/wire/openai.py); the SDK's transport saw bytes that parsed, and counted a success —
the circuit never opened on a backend failing every Responses call, and the limit read each
failure as a fast answer.

The Responses API names the request's own faults by code (a bad image, a refused prompt):
those are a :class:`~gptgate.errors.BadRequestError`, no strike against the backend, as a 400
on ``gate.chat``. A ``response.incomplete`` (``max_output_tokens`` reached) is an answer.
"""

from __future__ import annotations

from typing import Any

from .errors import BadRequestError, GateError
from .wire.openai import _in_band_error

__all__ = ["in_band_error", "in_band_failure"]

#: the Responses API's ``ResponseError.code`` values that are the request's fault, not the
#: server's (openai-python's ``types/responses/response_error.py``); ``server_error``,
#: ``vector_store_timeout`` and ``rate_limit_exceeded`` are the backend's
REQUEST_FAULTS = frozenset({
    "invalid_prompt", "data_residency_mismatch", "bio_policy", "misalignment_policy_violation",
    "invalid_image", "invalid_image_format", "invalid_base64_image", "invalid_image_url",
    "image_too_large", "image_too_small", "image_parse_error", "image_content_policy_violation",
    "invalid_image_mode", "image_file_too_large", "unsupported_image_media_type",
    "empty_image_file", "failed_to_download_image", "image_file_not_found",
})


def in_band_failure(obj: Any) -> Any | None:
    """The error a decoded body or stream event carries (its ``error`` object, or the event
    itself when it is one), None when it carries none."""
    if not isinstance(obj, dict):
        return None
    kind = obj.get("type")
    if kind == "response.failed":
        response = obj.get("response")
        error = response.get("error") if isinstance(response, dict) else None
        return error or {"code": "server_error", "message": "response.failed"}
    if kind == "error":  # the Responses API's error event; Anthropic's wraps its "error"
        return obj.get("error") or obj
    return obj.get("error") or None  # a Response's "error": null is none


def in_band_error(payload: Any, *, backend: str, status: int | None) -> GateError:
    """The typed error for ``payload`` (what :func:`in_band_failure` found), as ``gate.chat``
    maps it; a Responses API fault of the request's own is a ``BadRequestError``."""
    error = _in_band_error(payload, backend=backend, status=status)
    code = payload.get("code") if isinstance(payload, dict) else None
    if isinstance(code, str) and code in REQUEST_FAULTS:
        return BadRequestError(error.message, backend=backend, status=status)
    return error
