"""Which fleet state (``shared=``) a backend shares: its ``fleet_key``.

A provider's rate limits belong to an organization or project, not to a URL or a key: two
projects' keys on api.openai.com have a limit each, and one project's many keys (rotated,
one per service) share one. The fleet keyed a backend's limit, 429 pause, RPM/TPM budget,
circuit and warm-up by namespace + name + base_url + model, so two services whose backend
"openai" held different projects' keys shared one limit and one pause on one Redis, and one
project under two backend names was two limits. ``Backend(fleet_key="proj-a")`` names the
scope instead of the name: the same label (with the same base_url and model) shares, a
different one never does. Unset, the keys are the ones every earlier release uses, so a
rolling deploy keeps one fleet.

The label is the scope, never the key: the gateway cannot tell a project from a key, and a
key's fingerprint would split one project's limit at each rotation (old and new processes
two limits at once). A label shaped like a key, or equal to the backend's own, is refused.
"""

from __future__ import annotations

import hmac
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import Backend

__all__ = ["check_fleet_key", "fleet_scope"]

#: a label: as a backend name, so it sits in a Redis key as one does
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
#: before a label in the key, where no backend name can start: a label never meets a name
_MARK = "@"


def check_fleet_key(value: str, api_key: str | None) -> str:
    """``value`` if it is a label that is not an API key; else ``ValueError`` (which never
    quotes it: it may be a key pasted in the wrong place)."""
    from ..wire.openai import scrub_secrets  # the wire's key shapes, known to mask

    if not _LABEL.match(value):
        raise ValueError(
            "fleet_key must be a label of 1-64 letters, digits, '_', '.', ':', '-' "
            "(the project or scope whose rate limits the backend's key draws on)"
        )
    if scrub_secrets(value) != value or (
        api_key is not None and hmac.compare_digest(value.encode(), api_key.encode())
    ):
        raise ValueError(
            "fleet_key looks like an API key: it names the scope (a project id, a team) and "
            "goes into Redis's key names — keep the key in api_key / api_key_env"
        )
    return value


def fleet_scope(backend: Backend) -> str:
    """What the backend's fleet keys are named by: its name, or its ``fleet_key`` label."""
    return backend.name if backend.fleet_key is None else _MARK + backend.fleet_key
