"""The simulator's Batch API: OpenAI's ``/v1/files`` and ``/v1/batches``, in virtual time.

``SimBatches(engine, plan).attach()`` adds the routes to a :class:`SimEngine` (so to its
``SimTransport`` and ``SimServer``): input files are uploaded (multipart, purpose ``batch``)
and listed; a batch is validated at creation, runs for ``plan.complete_after_s`` of the
engine's clock, then writes its output and error files — in shuffled order, some items failed
(``fail_rate``: a 500 in the error file), some answers cut off (``abort_rate``:
``finish_reason: "abort"`` under a 200) or left unrun (``expire_rate``: the batch ends
``expired`` and those items carry ``batch_expired``). A cancelled batch keeps what it had
finished by then. Counters (``creates``, ``uploads``) and the bill (``billed_*``) are the
ground truth a test checks a client's durability and ledger against.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gptgate.sim import wire
from gptgate.sim.engine import SimEngine, SimResponse
from gptgate.sim.text import draw_for, output_text
from gptgate.sim.tokenizer import sim_prompt_tokens

__all__ = ["SimBatchPlan", "SimBatches"]

_ENDPOINT = "/v1/chat/completions"
_MAX_REQUESTS = 50_000


@dataclass(frozen=True, slots=True)
class SimBatchPlan:
    """How the simulated batches behave (the knobs a test turns)."""

    #: seconds of the engine's clock from creation to the end of a batch
    complete_after_s: float = 60.0
    #: each item's chance of failing with a 500 (its line in the error file)
    fail_rate: float = 0.0
    #: each item's chance of not running before the window ends (the batch ends ``expired``)
    expire_rate: float = 0.0
    #: each item's chance of a 200 answer its server cut off (``finish_reason: "abort"``, as
    #: a vLLM batch runner sends one): billed, its text truncated
    abort_rate: float = 0.0
    shuffle: bool = True
    seed: int = 0
    #: the organisation's enqueued token limit (prompt tokens of the batches not ended yet):
    #: a batch that would go over it fails at validation with ``token_limit_exceeded``, as
    #: OpenAI's do; None: no limit
    enqueued_token_limit: int | None = None
    #: the most bytes one Message Batches create body may hold (Anthropic's 256 MB): a
    #: larger one is the API's 413 ``request_too_large``; None: no limit
    max_batch_bytes: int | None = None


@dataclass(slots=True)
class _File:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int

    def info(self) -> dict[str, Any]:
        return {"id": self.id, "object": "file", "bytes": len(self.data),
                "created_at": self.created_at, "filename": self.filename,
                "purpose": self.purpose}


@dataclass(slots=True)
class _Batch:
    id: str
    input_file_id: str
    metadata: dict[str, Any]
    created: float
    created_at: int
    lines: list[dict[str, Any]]
    status: str = "validating"
    errors: list[dict[str, Any]] | None = None
    cancel_at: float | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict[str, int] = field(default_factory=lambda: {"total": 0, "completed": 0,
                                                              "failed": 0})


class SimBatches:
    """OpenAI's Files + Batches endpoints over a :class:`SimEngine`'s clock."""

    def __init__(self, engine: SimEngine, plan: SimBatchPlan | None = None) -> None:
        self.engine = engine
        self.plan = plan or SimBatchPlan()
        self.files: dict[str, _File] = {}
        self.batches: dict[str, _Batch] = {}
        #: batches created and files uploaded: a client that resumes must not add to these
        self.creates = 0
        self.uploads = 0
        #: what the batches billed (answered items only), at the batch price
        self.billed_requests = 0
        self.billed_input_tokens = 0
        self.billed_output_tokens = 0
        self._rng = random.Random(self.plan.seed)
        self._ids = 0

    @property
    def _endpoint(self) -> str:
        """The endpoint a batch names: Azure's is ``/chat/completions``."""
        return "/chat/completions" if self.engine.profile.flavor == "azure" else _ENDPOINT

    def attach(self) -> SimBatches:
        self.engine.batch_routes = self.handle
        return self

    def _next_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids:06d}"

    # -- HTTP -----------------------------------------------------------------------------

    async def handle(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> SimResponse | None:
        parts = path.removeprefix("/v1").strip("/").split("/")
        method = method.upper()
        if parts[0] == "files":
            return self._files(method, parts[1:], headers, body)
        if parts[0] == "batches":
            return self._batches(method, parts[1:], body)
        return None

    def _files(
        self, method: str, rest: list[str], headers: Mapping[str, str], body: bytes
    ) -> SimResponse:
        if not rest and method == "POST":
            return self._upload(headers, body)
        if not rest and method == "GET":
            files = sorted(self.files.values(), key=lambda f: f.id, reverse=True)
            return _ok({"object": "list", "data": [f.info() for f in files], "has_more": False})
        found = self.files.get(rest[0]) if rest else None
        if found is None:
            return _error(404, f"No such File object: {rest[0] if rest else ''}")
        if len(rest) == 2 and rest[1] == "content" and method == "GET":
            return SimResponse(200, [("content-type", "application/octet-stream")], found.data)
        return _ok(found.info())

    def _upload(self, headers: Mapping[str, str], body: bytes) -> SimResponse:
        fields = _multipart(headers.get("content-type", ""), body)
        if fields is None or "file" not in fields:
            return _error(400, "expected a multipart form with a 'file' field")
        purpose = fields.get("purpose", ("", b""))[1].decode()
        if purpose != "batch":
            return _error(400, f"Invalid purpose {purpose!r}: this simulator takes 'batch'")
        self.uploads += 1
        filename, data = fields["file"]
        file = _File(self._next_id("file-sim"), filename, purpose, data, self._epoch())
        self.files[file.id] = file
        return _ok(file.info())

    def _batches(self, method: str, rest: list[str], body: bytes) -> SimResponse:
        if not rest and method == "POST":
            return self._create(body)
        if not rest and method == "GET":
            batches = sorted(self.batches.values(), key=lambda b: b.id, reverse=True)
            data = [self._view(b) for b in batches]
            return _ok({"object": "list", "data": data, "has_more": False})
        batch = self.batches.get(rest[0]) if rest else None
        if batch is None:
            return _error(404, f"No batch found with id '{rest[0] if rest else ''}'.")
        if len(rest) == 2 and rest[1] == "cancel" and method == "POST":
            if batch.status not in ("completed", "failed", "expired", "cancelled"):
                batch.cancel_at = self.engine.clock.now()
                batch.status = "cancelling"
            return _ok(self._view(batch))
        return _ok(self._view(batch))

    # -- the batch's life -----------------------------------------------------------------

    def _create(self, body: bytes) -> SimResponse:
        try:
            req = json.loads(body)
        except ValueError:
            return _error(400, "We could not parse the JSON body of your request.")
        if not isinstance(req, dict):
            return _error(400, "The request body must be a JSON object.")
        if req.get("endpoint") != self._endpoint:
            return _error(400, f"Invalid endpoint {req.get('endpoint')!r}.")
        if req.get("completion_window") != "24h":
            return _error(400, "completion_window must be '24h'.")
        file = self.files.get(str(req.get("input_file_id")))
        if file is None:
            return _error(400, f"No such File object: {req.get('input_file_id')}")
        metadata = req.get("metadata") or {}
        self.creates += 1
        lines, errors = _read_input(file.data, self._endpoint)
        batch = _Batch(self._next_id("batch_sim"), file.id, dict(metadata),
                       self.engine.clock.now(), self._epoch(), lines)
        batch.counts["total"] = len(lines)
        if not errors:
            errors = self._over_enqueued_limit(lines)
        if errors:
            batch.status, batch.errors = "failed", errors
        self.batches[batch.id] = batch
        return _ok(self._view(batch))

    def _over_enqueued_limit(self, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """OpenAI's refusal of a batch whose prompt tokens, with those of the batches still
        queued or running, exceed the organisation's enqueued token limit."""
        limit = self.plan.enqueued_token_limit
        if limit is None:
            return []
        for batch in self.batches.values():
            self._advance(batch)
        queued = sum(
            _prompt_tokens(b.lines) for b in self.batches.values()
            if b.status in ("validating", "in_progress", "finalizing")
        )
        if queued + _prompt_tokens(lines) <= limit:
            return []
        model = str(lines[0].get("body", {}).get("model")) if lines else "the model"
        return [{"code": "token_limit_exceeded", "line": None, "message": (
            f"Enqueued token limit reached for {model} in organization org-sim. Limit: "
            f"{limit} enqueued tokens. Please try again once some in_progress batches have "
            "been completed.")}]

    def _view(self, batch: _Batch) -> dict[str, Any]:
        self._advance(batch)
        return {
            "id": batch.id, "object": "batch", "endpoint": self._endpoint,
            "input_file_id": batch.input_file_id, "completion_window": "24h",
            "status": batch.status, "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id, "created_at": batch.created_at,
            "request_counts": dict(batch.counts), "metadata": batch.metadata,
            "errors": {"object": "list", "data": batch.errors} if batch.errors else None,
        }

    def _advance(self, batch: _Batch) -> None:
        """Move ``batch`` along the engine's clock; at its end, write its files."""
        if batch.status in ("completed", "failed", "expired", "cancelled"):
            return
        now = self.engine.clock.now()
        total = len(batch.lines)
        if batch.cancel_at is not None:
            self._finish(batch, int(total * self._ran(batch, batch.cancel_at)), "cancelled")
        elif self._ran(batch, now) >= 1.0:
            self._finish(batch, total, "completed")
        else:
            batch.status = "in_progress"
            batch.counts["completed"] = int(total * self._ran(batch, now))

    def _ran(self, batch: _Batch, at: float) -> float:
        """How much of ``batch`` had run by ``at`` (0 to 1)."""
        span = self.plan.complete_after_s
        return min(1.0, max(0.0, (at - batch.created) / span)) if span > 0 else 1.0

    def _finish(self, batch: _Batch, done: int, how: str) -> None:
        rng, plan = self._rng, self.plan
        order = list(range(len(batch.lines)))
        if plan.shuffle:
            rng.shuffle(order)
        out: list[str] = []
        err: list[str] = []
        expired = False
        for position, i in enumerate(order):
            line = batch.lines[i]
            cid = line["custom_id"]
            if position >= done:
                code = "batch_cancelled" if how == "cancelled" else "batch_expired"
                err.append(_error_line(cid, code, f"This request was not run ({code})."))
                continue
            if how == "completed" and rng.random() < plan.expire_rate:
                expired = True
                err.append(_error_line(cid, "batch_expired",
                                       "This request could not be executed before the "
                                       "completion window expired."))
                continue
            if rng.random() < plan.fail_rate:
                body = json.loads(wire.error_body(500, "The server had an error.", "server_error"))
                err.append(_response_line(cid, 500, body))
                continue
            answer = self._answer(batch, line["body"])
            if plan.abort_rate and rng.random() < plan.abort_rate:  # no draw at 0: seeds hold
                answer["choices"][0]["finish_reason"] = "abort"
            out.append(_response_line(cid, 200, answer))
        batch.counts["completed"] = len(out)
        batch.counts["failed"] = len(err)
        if out:
            batch.output_file_id = self._store(f"{batch.id}_output.jsonl", out)
        if err:
            batch.error_file_id = self._store(f"{batch.id}_error.jsonl", err)
        batch.status = "expired" if expired else how

    def _answer(self, batch: _Batch, request: dict[str, Any]) -> dict[str, Any]:
        """The completion the engine would give this request live (the same seeded draw of
        its length and text, from the same body bytes), billed at the batch price."""
        p = self.engine.profile
        raw = wire.dumps(request).encode()  # the bytes a client sent live: the same draw
        draw = draw_for(self.engine.seed, raw, p.output_tokens_mean, p.output_tokens_sigma,
                        p.output_tokens_max)
        prompt = sim_prompt_tokens(request.get("messages") or [])
        cap = request.get("max_completion_tokens") or request.get("max_tokens")
        limit = max(1, p.context_tokens - prompt)
        if isinstance(cap, int):
            limit = min(limit, cap)
        output = min(draw.output_tokens, limit)
        self.billed_requests += 1
        self.billed_input_tokens += prompt
        self.billed_output_tokens += output
        meta = wire.ResponseMeta(id=f"chatcmpl-{batch.id}-{draw.text_key:x}",
                                 created=batch.created_at, model=str(request.get("model")),
                                 fingerprint="fp_sim_batch", flavor="openai")
        finish = "length" if output < draw.output_tokens else "stop"
        body = wire.completion_body(meta, output_text(draw.text_key, output), finish,
                                    wire.usage(prompt, 0, output))
        return dict(json.loads(body))

    def _store(self, filename: str, lines: list[str]) -> str:
        file = _File(self._next_id("file-sim"), filename, "batch_output",
                     ("\n".join(lines) + "\n").encode(), self._epoch())
        self.files[file.id] = file
        return file.id

    def _epoch(self) -> int:
        return 1_700_000_000 + int(self.engine.clock.now())


def _ok(obj: dict[str, Any]) -> SimResponse:
    body = wire.dumps(obj).encode()
    return SimResponse.json(200, body)


def _error(status: int, message: str) -> SimResponse:
    body = wire.error_body(status, message, "invalid_request_error")
    return SimResponse.json(status, body)


def _response_line(cid: str, status: int, body: dict[str, Any]) -> str:
    return wire.dumps({"id": f"batch_req_{cid}", "custom_id": cid, "response": {
        "status_code": status, "request_id": f"req_{cid}", "body": body}, "error": None})


def _prompt_tokens(lines: list[dict[str, Any]]) -> int:
    return sum(sim_prompt_tokens(line["body"].get("messages") or []) for line in lines)


def _error_line(cid: str, code: str, message: str) -> str:
    return wire.dumps({"id": f"batch_req_{cid}", "custom_id": cid, "response": None,
                       "error": {"code": code, "message": message}})


def _read_input(data: bytes, endpoint: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The request lines of an input file, and what is wrong with it (as OpenAI reports)."""
    lines: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            errors.append({"code": "invalid_json_line", "line": number,
                           "message": "This line is not parseable as valid JSON."})
            continue
        cid = obj.get("custom_id") if isinstance(obj, dict) else None
        if not isinstance(cid, str) or cid in seen or obj.get("url") != endpoint or \
                not isinstance(obj.get("body"), dict):
            errors.append({"code": "invalid_request", "line": number,
                           "message": "custom_id missing or repeated, or wrong url/body."})
            continue
        seen.add(cid)
        lines.append(obj)
    if len(lines) > _MAX_REQUESTS:
        errors.append({"code": "too_many_requests", "line": None,
                       "message": f"A batch may hold at most {_MAX_REQUESTS} requests."})
    return lines, errors


def _multipart(content_type: str, body: bytes) -> dict[str, tuple[str, bytes]] | None:
    """The fields of a multipart/form-data body: name → (filename, value)."""
    marker = "boundary="
    if "multipart/form-data" not in content_type or marker not in content_type:
        return None
    boundary = content_type.split(marker, 1)[1].split(";")[0].strip().strip('"').encode()
    fields: dict[str, tuple[str, bytes]] = {}
    for chunk in body.split(b"--" + boundary)[1:]:
        if chunk.startswith(b"--"):
            break
        head, _, value = chunk.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        disposition = head.decode("latin-1")
        name = _param(disposition, "name")
        if name is not None:
            fields[name] = (_param(disposition, "filename") or "", value.removesuffix(b"\r\n"))
    return fields


def _param(header: str, name: str) -> str | None:
    for piece in header.replace("\r\n", ";").split(";"):
        key, _, value = piece.strip().partition("=")
        if key == name:
            return value.strip('"')
    return None
