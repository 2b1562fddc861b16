"""Whether a backend takes ``stream_options``, learnt from its first refusal.

gptgate asks every stream for ``stream_options.include_usage`` (the usage chunk is how its
billed tokens are known). Some servers refuse the key with a 400: Azure OpenAI before
api-version 2024-09-01-preview ("Unrecognized request argument supplied: stream_options"),
servers and proxies answering OpenAI's "Unknown parameter: 'stream_options'". Every
``gate.stream`` there failed, and every ``gate.chat`` that streamed (hedged, long answers).
The first refusal teaches the backend: that attempt may be tried again at once without the
key, and later streams go without; their usage is then estimated, as for any server that
sends none (``Usage.estimated``).
"""

from __future__ import annotations

import logging

from gptgate.errors import BadRequestError, GateError

__all__ = ["StreamUsageOption", "learn_refusal"]

_log = logging.getLogger("gptgate")

_KEY = "stream_options"


class StreamUsageOption:
    """One backend's answer to ``stream_options``: taken until a 400 names it."""

    __slots__ = ("refused",)

    def __init__(self) -> None:
        self.refused = False


def learn_refusal(option: StreamUsageOption | None, error: GateError) -> GateError:
    """``error`` (a streamed attempt's non-2xx), made retryable once when it is the first
    refusal of ``stream_options`` — the next attempt goes without it."""
    if (
        option is None
        or option.refused
        or not isinstance(error, BadRequestError)
        or _KEY not in error.message
    ):
        return error
    option.refused = True
    error.retryable = True
    _log.warning(
        "backend %r refuses stream_options: its streams go without include_usage from now "
        "on, their usage estimated", error.backend,
    )
    return error
