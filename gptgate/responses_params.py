"""The Responses API's parameters, refused on a chat-completions call (``gate.chat``,
``gate.stream``, ``gate.map``).

``gate.chat`` speaks chat completions. A caller coming from ``client.responses.create`` writes
``max_output_tokens=``, ``instructions=``, ``input=``: sent as is, OpenAI answers a 400 after
the round trip, and a self-hosted server (vLLM, llama-server) ignores the key without a word —
``max_output_tokens`` then bounds nothing, and gptgate's own reading of the bound (the rate
budget, the stream rule, the tiers) sees none. Each is refused before anything is sent, with
its chat-completions name; ``extra_body=`` still sends any key as is. The Responses API
itself goes through the SDK on ``gate.http_client`` (docs/guide/calls.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import BadRequestError

__all__ = ["refuse_responses_params"]

#: the Responses API's parameter → what a chat-completions call says instead
_INSTEAD = {
    "max_output_tokens": "max_completion_tokens= (or max_tokens=)",
    "instructions": 'a first {"role": "system", "content": ...} message',
    "input": "the messages",
    "previous_response_id": (
        "the earlier turns in the messages (gate.chat keeps no state; for the Responses API "
        "use the openai SDK's client.responses on gate.http_client(...))"
    ),
}


def refuse_responses_params(params: Mapping[str, Any]) -> None:
    """Raise :class:`BadRequestError` naming the first Responses API parameter in ``params``."""
    for name in params:
        instead = _INSTEAD.get(name)
        if instead is not None:
            raise BadRequestError(
                f"{name!r} is a Responses API parameter; gate.chat speaks chat completions, "
                f"which take {instead}; nothing was sent (to send it anyway: "
                f"extra_body={{{name!r}: ...}})"
            )
