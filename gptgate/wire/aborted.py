"""An answer its server cut off: ``finish_reason: "abort"`` or ``"error"``.

vLLM ends a request it aborted — ``pause_generation(mode="abort")``, a request dropped on
preemption or shutdown — with ``FinishReason.ABORT``, sent as ``"abort"``; SGLang sends its
``FINISH_ABORT`` (a graceful abort, without a status code) the same way. vLLM's
``FinishReason.ERROR``, sent as ``"error"``, is a retryable request-level internal error (a
KV-cache load failure, say), and OpenRouter sends it for a provider that failed under a
200. Either way the answer is truncated, not finished: returned as a result, a caller took
half an answer for a whole one. So it is the attempt's failure — a retryable
:class:`BackendError` (retried like a 5xx, counted against the backend's circuit), its usage
booked as billed; a stream that had shown text ends in :class:`StreamInterruptedError`
(wire/openai.py ``ChatStreamReader``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import BackendError
from ..results import Usage
from ..tokens import tokens_for_chars
from .answer_chars import answer_chars

if TYPE_CHECKING:
    from ..errors import GateError
    from .openai import ParsedChat

__all__ = ["ABORTED", "aborted_error", "billed_failure_usage", "is_aborted", "refuse_aborted"]

#: the finish reasons that mean the server cut the answer off (vLLM's
#: ``FINISH_REASON_STRINGS`` "abort" and "error", SGLang's "abort")
ABORTED = frozenset({"abort", "error"})


def is_aborted(finish_reason: str | None) -> bool:
    """Whether an answer's finish reason says its server cut it off."""
    return finish_reason in ABORTED


def aborted_error(
    backend: str | None,
    usage: Usage | None,
    request_id: str | None = None,
    *,
    output_tokens: int = 0,
    finish_reason: str | None = "abort",
) -> BackendError:
    """The attempt's failure: billed (the server ran the prompt and what it generated), the
    server's own count of it kept on ``usage_so_far`` for the ledger."""
    error = BackendError(
        f'the server cut the answer off (finish_reason "{finish_reason}"): it is truncated',
        backend=backend,
        request_id=request_id,
        billed=True,
    )
    error.output_tokens = usage.output_tokens if usage is not None else output_tokens
    error.usage_so_far = usage
    return error


def refuse_aborted(parsed: ParsedChat, backend: str, request_id: str | None) -> ParsedChat:
    """A non-streamed answer, unless its server cut it off (then :func:`aborted_error`; a
    server that sent no usage: its output counted from what the answer holds)."""
    if is_aborted(parsed.finish_reason):
        held = tokens_for_chars(answer_chars(parsed.raw, parsed.text))
        raise aborted_error(backend, parsed.usage, request_id, output_tokens=held,
                            finish_reason=parsed.finish_reason)
    return parsed


def billed_failure_usage(error: GateError, prompt_tokens: int) -> Usage:
    """What a billed failed attempt cost where no retry loop booked it (a Batch API item):
    the server's count when it sent one, else the prompt and what the answer held."""
    if error.usage_so_far is not None:
        return error.usage_so_far
    return Usage(input_tokens=prompt_tokens, output_tokens=error.output_tokens, estimated=True)
