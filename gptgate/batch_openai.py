"""OpenAI's Files + Batches API (Azure OpenAI's is the same shape): ``BatchAPI`` for the
default OpenAI-compatible dialect.

A job's input is a JSONL file of ``{"custom_id", "method", "url", "body"}`` lines uploaded to
``/files`` (purpose ``batch``), run by ``POST /batches`` (``completion_window: 24h``); the
answers come back in an output file and the failures in an error file, in no particular
order. Files carry no metadata, so an input file is found again by its name (which holds the
job's key); a batch by its ``metadata``.
"""

from __future__ import annotations

import io
import itertools
import json
import secrets
from collections.abc import Iterator, Mapping
from typing import Any

import httpx2

from .batch_api import BatchLimits, CreateIntent, ItemResult, RemoteBatch
from .errors import BackendError, GatewayClosedError
from .wire.openai import error_for_exception, error_for_status

__all__ = ["OPENAI_LIMITS", "OpenAIBatches", "result_records"]

#: 50,000 requests or 200 MB an input file (platform.openai.com/docs/guides/batch)
OPENAI_LIMITS = BatchLimits(max_requests=50_000, max_bytes=200 * 1024 * 1024)

_ENDPOINT = "/v1/chat/completions"
#: how far back a lookup pages through the lists (newest first) before giving up
_MAX_PAGES = 50


class OpenAIBatches:
    """``BatchAPI`` over ``client`` (the backend's pooled client: base URL and key)."""

    #: the input goes up as a file first (Anthropic's batches take their requests inline)
    uploads = True
    #: the file is the lines, each with its newline: nothing more
    envelope_bytes = 0

    def __init__(
        self,
        client: httpx2.AsyncClient,
        backend: str,
        limits: BatchLimits = OPENAI_LIMITS,
        *,
        root: str = "/",
        params: Mapping[str, str] | None = None,
        endpoint: str = _ENDPOINT,
    ) -> None:
        self._client = client
        self._backend = backend
        self.limits = limits
        #: where ``files`` and ``batches`` live (relative to the client's ``base_url``, or an
        #: absolute URL: Azure's ``{endpoint}/openai/``), the query every request carries
        #: (Azure's ``api-version``) and the endpoint the request lines name
        self._root = root
        self._params = dict(params or {})
        self._endpoint = endpoint

    # -- HTTP -----------------------------------------------------------------------------

    async def _request(self, method: str, path: str, **options: Any) -> httpx2.Response:
        if self._client.is_closed:
            raise GatewayClosedError(
                "the gateway that submitted this batch job closed; the job goes on at the "
                "provider: take it up again with gate.batch(the same items, job_dir=...)",
                backend=self._backend,
            )
        if not path.startswith(("http://", "https://")):  # else a result URL, as given
            path = (self._root + path.lstrip("/")).rstrip("/") or "/"
        if self._params:
            options["params"] = {**self._params, **options.get("params", {})}
        try:
            response = await self._client.request(method, path, **options)
        except httpx2.HTTPError as exc:
            raise error_for_exception(exc, backend=self._backend) from exc
        if response.status_code >= 300:
            raise error_for_status(
                response.status_code, response.headers, response.content, backend=self._backend
            )
        return response

    async def _json(self, method: str, path: str, **options: Any) -> dict[str, Any]:
        response = await self._request(method, path, **options)
        try:
            obj = json.loads(response.content)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            raise BackendError(
                f"malformed batch API response to {method} {path}: not a JSON object",
                backend=self._backend, status=response.status_code,
            )
        return obj

    async def _pages(self, path: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Every object of a paged list (newest first), up to ``_MAX_PAGES`` pages."""
        found: list[dict[str, Any]] = []
        after: str | None = None
        for _ in range(_MAX_PAGES):
            page = await self._json(
                "GET", path, params={**params, **({"after": after} if after else {})}
            )
            data = [o for o in page.get("data") or [] if isinstance(o, dict)]
            found.extend(data)
            if not page.get("has_more") or not data:
                break
            after = str(data[-1].get("id"))
        return iter(found)

    # -- BatchAPI -------------------------------------------------------------------------

    def request_line(self, custom_id: str, body: bytes) -> bytes:
        head = json.dumps(
            {"custom_id": custom_id, "method": "POST", "url": self._endpoint},
            separators=(",", ":"),
        )
        return head[:-1].encode() + b',"body":' + body + b"}"

    async def find_file(self, filename: str) -> str | None:
        for obj in await self._pages("/files", {"purpose": "batch", "limit": 10_000}):
            if obj.get("filename") == filename and isinstance(obj.get("id"), str):
                return str(obj["id"])
        return None

    async def upload(self, filename: str, data: bytes) -> str:
        boundary = secrets.token_hex(16)
        body = b"".join(
            [
                f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n'
                f"batch\r\n--{boundary}\r\n"
                f'Content-Disposition: form-data; name="file"; filename="{filename}"\r\n'
                "Content-Type: application/jsonl\r\n\r\n".encode(),
                data,
                f"\r\n--{boundary}--\r\n".encode(),
            ]
        )
        obj = await self._json(
            "POST", "/files", content=body,
            headers={"content-type": f"multipart/form-data; boundary={boundary}"},
        )
        return _id(obj, "file", self._backend)

    async def find_batch(self, metadata: Mapping[str, str], intent: CreateIntent) -> str | None:
        for obj in await self._pages("/batches", {"limit": 100}):
            meta = obj.get("metadata")
            if isinstance(meta, dict) and all(meta.get(k) == v for k, v in metadata.items()):
                return _id(obj, "batch", self._backend)
        return None

    async def create(self, file_id: str, metadata: Mapping[str, str], data: bytes) -> str:
        obj = await self._json(
            "POST", "/batches",
            json={
                "input_file_id": file_id,
                "endpoint": self._endpoint,
                "completion_window": "24h",
                "metadata": dict(metadata),
            },
        )
        return _id(obj, "batch", self._backend)

    async def retrieve(self, batch_id: str) -> RemoteBatch:
        return _remote(await self._json("GET", f"/batches/{batch_id}"), self._backend)

    async def cancel(self, batch_id: str) -> None:
        await self._json("POST", f"/batches/{batch_id}/cancel")

    async def results(self, batch: RemoteBatch) -> Iterator[ItemResult]:
        """The output and error files' lines, parsed one at a time as the caller reads them:
        only the files' bytes are held, not every line's parsed answer at once."""
        files: list[bytes] = []
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                files.append((await self._request("GET", f"/files/{file_id}/content")).content)
        return itertools.chain.from_iterable(map(_result_lines, files))


def _id(obj: Mapping[str, Any], what: str, backend: str) -> str:
    value = obj.get("id")
    if not isinstance(value, str) or not value:
        raise BackendError(f"malformed batch API response: the {what} has no id", backend=backend)
    return value


def _count(counts: Any, name: str) -> int:
    value = counts.get(name) if isinstance(counts, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _remote(obj: Mapping[str, Any], backend: str) -> RemoteBatch:
    counts = obj.get("request_counts")
    errors = obj.get("errors")
    reasons = None
    if isinstance(errors, dict) and isinstance(errors.get("data"), list):
        reasons = "; ".join(  # the code too: "token_limit_exceeded" is retryable
            (f"[{e['code']}] " if e.get("code") else "") + str(e.get("message"))
            for e in errors["data"][:5] if isinstance(e, dict)
        ) or None
    output, error = obj.get("output_file_id"), obj.get("error_file_id")
    return RemoteBatch(
        id=_id(obj, "batch", backend),
        status=str(obj.get("status") or "unknown"),
        total=_count(counts, "total"),
        completed=_count(counts, "completed"),
        failed=_count(counts, "failed"),
        output_file_id=output if isinstance(output, str) and output else None,
        error_file_id=error if isinstance(error, str) and error else None,
        errors=reasons,
    )


def result_records(data: bytes) -> Iterator[dict[str, Any]]:
    """The JSON objects with a ``custom_id`` in a result file; a line that is not one is
    skipped (its item then ends as "no result")."""
    for raw in io.BytesIO(data):  # a line at a time: no list of every line's copy
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("custom_id"), str):
            yield obj


def _result_lines(data: bytes) -> Iterator[ItemResult]:
    """``{"custom_id", "response": {"status_code", "body"}, "error"}`` lines; a line that is
    not one is skipped (its item then ends as "no result")."""
    for obj in result_records(data):
        response, error = obj.get("response"), obj.get("error")
        if isinstance(response, dict) and isinstance(response.get("status_code"), int):
            yield ItemResult(obj["custom_id"], response["status_code"], response.get("body"))
        else:
            err = error if isinstance(error, dict) else {}
            code, message = err.get("code"), err.get("message")
            yield ItemResult(
                obj["custom_id"], None, None,
                error_code=code if isinstance(code, str) else "unknown",
                error_message=message if isinstance(message, str) else None,
            )
