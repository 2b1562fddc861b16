"""gptgate's own options given to a call, refused instead of sent to the server.

A call's unknown keywords are OpenAI parameters and go into the request body. A Backend or
Gateway option there (``gate.map(items, concurrency="auto")``) would go too, and most
self-hosted servers (llama-server, vLLM) ignore an unknown body key without a word: the caller
believes the option took effect. Names that are also body keys some API reads (``model``,
``seed``, ``user``, OpenRouter's ``provider``, …) pass as before; ``extra_body=`` sends any key.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from .config import Backend, GatewayConfig
from .errors import BadRequestError

__all__ = ["refuse_own_options"]

#: option names that are also request-body keys of some OpenAI-compatible API, or a call's
#: own keywords: never refused here
_BODY_KEYS = frozenset({
    "model", "name", "seed", "user", "provider", "timeout", "stream", "tier", "private",
    "max_attempts", "price", "headers", "backends",
    # the Responses API's answer bound: a caller who meant max_tokens needs no pointer to Backend
    "max_output_tokens",
})


@cache
def _owners() -> Mapping[str, str]:
    """Option name → the class it belongs to (``Backend`` wins over ``Gateway``)."""
    owners = {name: "Gateway" for name in GatewayConfig.model_fields}
    owners.update({name: "Backend" for name in Backend.model_fields})
    return {name: owner for name, owner in owners.items() if name not in _BODY_KEYS}


def refuse_own_options(params: Mapping[str, Any]) -> None:
    """Raise :class:`BadRequestError` naming the first gptgate option among ``params``."""
    owners = _owners()
    for name in params:
        owner = owners.get(name)
        if owner is not None:
            raise BadRequestError(
                f"{name!r} is a gptgate option, not a call parameter: set it as "
                f"{owner}({name}=...); nothing was sent (to send it to the server anyway: "
                f"extra_body={{{name!r}: ...}})"
            )
