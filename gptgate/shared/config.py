"""``Shared``: where a fleet of gateways keeps its common state (validated up front).

Pure configuration: importing it never imports Redis, so a gateway without ``shared=`` pays
nothing for the feature.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, field_validator

__all__ = ["SCHEMES", "Shared"]

#: what redis-py's ``from_url`` opens (TLS, plain TCP, a Unix socket)
SCHEMES = frozenset({"redis", "rediss", "unix"})

def _redact(url: str) -> str:
    """The URL with any password replaced: it is shown in errors."""
    return re.sub(r"(//[^/@:]*:)[^/@]*@", r"\1***@", url)


_NAMESPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


class Shared(BaseModel):
    """A Redis (6.2+, or Valkey) shared by every process of a fleet: ``Gateway(shared=...)``.

    ``namespace`` separates fleets on one Redis; ``lease_s`` is how long a permit held by a
    process that died (kill -9) stays counted; ``op_budget_s`` is how long one Redis operation
    may take before the process treats Redis as down and falls back to local limits.
    """

    #: the URL may carry a password: keep it out of error messages
    model_config = ConfigDict(
        frozen=True, extra="forbid", allow_inf_nan=False, hide_input_in_errors=True
    )

    url: str
    namespace: str = "gptgate"
    lease_s: StrictFloat = Field(default=10.0, gt=0, le=3600)
    op_budget_s: StrictFloat = Field(default=0.05, gt=0, le=60)

    def __init__(self, url: str | None = None, /, **data: Any) -> None:
        if url is not None:
            data["url"] = url
        super().__init__(**data)

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str) -> str:
        shown = _redact(url)
        try:
            parts = urlsplit(url)
            port = parts.port  # a non-numeric or out-of-range port raises here
        except ValueError as error:
            raise ValueError(f"malformed URL {shown!r}: {error}") from None
        if parts.scheme not in SCHEMES:
            known = ", ".join(f"{s}://" for s in sorted(SCHEMES))
            raise ValueError(f"unknown scheme in {shown!r}; expected one of {known}")
        if parts.scheme == "unix":
            if not parts.path:
                raise ValueError(f"malformed URL {shown!r}: a unix:// URL needs a socket path")
            return url
        if not parts.hostname or any(c.isspace() for c in url):
            raise ValueError(f"malformed URL {shown!r}: no host")
        database = parts.path.strip("/")
        if database and not database.isdigit():
            raise ValueError(f"malformed URL {shown!r}: the path must be a database number")
        del port
        return url

    @field_validator("namespace")
    @classmethod
    def _check_namespace(cls, namespace: str) -> str:
        if not _NAMESPACE.match(namespace):
            raise ValueError(
                "namespace must be 1-64 letters, digits or _.:- (starting with a letter or "
                f"digit), got {namespace!r}"
            )
        return namespace

    def __repr__(self) -> str:
        # the URL may carry a password: show only where it points
        parts = urlsplit(self.url)
        where = parts.hostname or parts.path
        return (
            f"Shared({parts.scheme}://{where}, namespace={self.namespace!r}, "
            f"lease_s={self.lease_s:g})"
        )

    __str__ = __repr__
