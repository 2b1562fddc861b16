"""``Shared``: where a fleet of gateways keeps its common state (validated up front).

Pure configuration: importing it never imports Redis, so a gateway without ``shared=`` pays
nothing for the feature.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    field_serializer,
    field_validator,
)

__all__ = ["SCHEMES", "Shared"]

#: what redis-py's ``from_url`` opens (TLS, plain TCP, a Unix socket)
SCHEMES = frozenset({"redis", "rediss", "unix"})

#: what stands for a password in every URL gptgate shows
MASK = "****"


def _redact(url: str) -> str:
    """The whole URL — scheme, host, port, database — with its password masked: what logs
    and errors show. A lone user part (``redis://secret@host``) is masked too: redis-py
    sends it as a user name, but it is where a password pasted without its colon lands."""
    try:
        parts = urlsplit(url)
    except ValueError:  # malformed (its error shows it): a best effort
        return re.sub(r"//[^/]*@", f"//{MASK}@", url)
    netloc, query = parts.netloc, parts.query
    if "@" in url.split("?", 1)[0] and "@" not in netloc:
        return _mask_loose(url)
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        name, colon, _ = user.partition(":")
        netloc = f"{name}:{MASK}@{host}" if colon else f"{MASK}@{host}"
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(key == "password" for key, _ in pairs):  # redis-py reads ?password= too
        query = urlencode([(k, MASK if k == "password" else v) for k, v in pairs], safe="*")
    if (netloc, query) == (parts.netloc, parts.query):
        return url  # nothing to mask (and unix:///path stays as written)
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _mask_loose(url: str) -> str:
    """A URL with an ``@`` that did not parse as credentials (``rediss//:pw@h``, ``redis:/``,
    a ``/`` in the password): everything between the scheme and the last ``@`` is masked —
    such a URL is refused anyway, and its error must not carry the password."""
    head, _, tail = url.split("?", 1)[0].rpartition("@")
    slashes = head.find("//")
    scheme = re.match(r"[A-Za-z][A-Za-z0-9+.-]*:/?/?", head)
    start = slashes + 2 if slashes >= 0 else (scheme.end() if scheme else 0)
    user = head[start:]
    name, colon, _ = user.partition(":")
    shown = f"{name}:{MASK}" if colon and "/" not in name else MASK
    return f"{head[:start]}{shown}@{tail}"


_NAMESPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


class Shared(BaseModel):
    """A Redis (6.2+, or Valkey) shared by every process of a fleet: ``Gateway(shared=...)``.

    ``namespace`` separates fleets on one Redis; ``lease_s`` is how long a permit held by a
    process that died (kill -9) stays counted; ``op_budget_s`` is how long one Redis operation
    may take before the process treats Redis as down and falls back to local limits.
    ``required``: a Redis that cannot be reached at start fails the start
    (:class:`~gptgate.errors.SharedUnreachableError`) instead of starting on local limits
    (one call per backend at a time until the fleet is seen: docs/guide/many-processes.md).
    """

    #: the URL may carry a password: keep it out of error messages
    model_config = ConfigDict(
        frozen=True, extra="forbid", allow_inf_nan=False, hide_input_in_errors=True
    )

    url: str
    namespace: str = "gptgate"
    lease_s: StrictFloat = Field(default=10.0, gt=0, le=3600)
    op_budget_s: StrictFloat = Field(default=0.05, gt=0, le=60)
    #: a Redis unreachable at start fails the start (``SharedUnreachableError``) instead of
    #: starting on one call per backend at a time until the fleet is seen
    required: StrictBool = False

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
            # urllib quotes what it could not read as a port: with a '/' in the password,
            # that is the password's start
            detail = re.sub(r" as '.*'$", "", str(error))
            raise ValueError(f"malformed URL {shown!r}: {detail}") from None
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

    @field_serializer("url")
    def _dump_url(self, url: str) -> str:
        """Dumped as shown (``display_url``): a configuration logged at start must not carry
        the Redis password."""
        return _redact(url)

    @field_validator("namespace")
    @classmethod
    def _check_namespace(cls, namespace: str) -> str:
        if not _NAMESPACE.match(namespace):
            raise ValueError(
                "namespace must be 1-64 letters, digits or _.:- (starting with a letter or "
                f"digit), got {namespace!r}"
            )
        return namespace

    @property
    def display_url(self) -> str:
        """The URL as logs and errors show it: whole, its password masked."""
        return _redact(self.url)

    def mask(self, text: str) -> str:
        """``text`` with this URL's password masked wherever it appears (an error's text)."""
        parts = urlsplit(self.url)
        secrets = [parts.password, *(v for k, v in parse_qsl(parts.query) if k == "password")]
        if "@" in parts.netloc and parts.password is None:
            secrets.append(parts.username)  # a lone user part: masked like a password
        for secret in secrets:
            if secret:
                text = text.replace(secret, MASK)
        return text

    def __repr__(self) -> str:
        required = ", required=True" if self.required else ""
        return (
            f"Shared({self.display_url!r}, namespace={self.namespace!r}, "
            f"lease_s={self.lease_s:g}{required})"
        )

    __str__ = __repr__
