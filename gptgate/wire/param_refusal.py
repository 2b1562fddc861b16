"""A 500 that is a server's refusal of the request itself, not a failure of the server.

llama-server's request parser (llama.cpp ``oaicompat_chat_params_parse``) throws
``std::runtime_error`` for a parameter the running server does not take, and its handler
answers every such exception as ``server_error``, HTTP 500: tools on a server started without
``--jinja`` ("tools param requires --jinja flag", "Unsupported param (--jinja mode required for
tool call): tools"), "Cannot use tools with stream", ``n`` > 1 ("Only one completion choice is
allowed"), "Unsupported param: best_of", … The same request meets the same refusal every time,
so a retry cannot help and the server's health is not in question: read as the 5xx it claims to
be, two tool calls opened the backend's circuit and every other call to it failed.
"""

from __future__ import annotations

import re

__all__ = ["refuses_request"]

#: llama-server's parser messages (its server utils), case-insensitive
_REFUSALS = re.compile(
    r"--jinja"
    r"|cannot use tools with stream"
    r"|unsupported param"
    r"|illegal param"
    r"|only one completion choice is allowed"
    r"|only no echo is supported"
    r"|response_format type must be one of"
    r"|can be specified, but not both",
    re.IGNORECASE,
)


def refuses_request(status: int | None, text: str) -> bool:
    """Whether a response of ``status`` saying ``text`` refuses the request's parameters (a
    bad request, whatever its status) rather than reporting the server's failure."""
    return status == 500 and _REFUSALS.search(text) is not None
