"""MkDocs hook: the configuration reference, generated from the models themselves.

A page line ``<!-- fields: gptgate.config.Backend -->`` becomes a table of that pydantic model's
fields — name, type as written in the source, default, bounds, and the ``#:`` comment above the
field — so the reference cannot fall behind the code: a field added to ``GatewayConfig`` shows
up on the next build. Fields without a ``#:`` comment take their line from ``NOTES`` below.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

_MARKER = re.compile(r"^<!-- fields: ([\w.]+) -->$", re.MULTILINE)

#: what a field without a ``#:`` comment in the source means (keyed "Model.field")
NOTES: dict[str, str] = {
    "Backend.name": "how calls, stats and spans name this backend: 1–64 letters, digits, "
    "`_ . : -`; unique within a gateway",
    "Backend.base_url": "absolute `http(s)://host[:port]/path`: no credentials, no query or "
    "fragment",
    "Backend.model": "the model sent in every request (a call's own `model` is replaced by it)",
    "Backend.hardware": "`tpu`, `gpu` or `cpu`: the router's first-token and latency priors "
    "before the backend has samples",
    "Backend.api_key": "the key (a `SecretStr`: never in a repr, log, span or error); None → "
    "the environment variable `api_key_env`, read at request time",
    "Backend.min_concurrency": "the adaptive limit never goes below this",
    "Backend.initial_concurrency": "where the adaptive limit starts (slow start doubles it)",
    "Backend.max_concurrency": "the adaptive limit's ceiling; the pool is sized from it",
    "Backend.connect_timeout": "seconds to open a connection",
    "Backend.private": "compliance: a `private=True` call goes only to backends marked private",
    "Backend.tier": "`small` or `large`: the model's tier for `tier=` and `tier=\"auto\"`",
    "Backend.provider": "`gen_ai.provider.name` on spans and metrics (the conventions' "
    "value: `azure` is `azure.ai.openai`)",
    "Backend.headers": "extra HTTP headers on every request (values are never logged)",
    "GatewayConfig.backends": "the backends, at least one, names unique",
    "GatewayConfig.backoff_base_s": "retry back-off: full jitter, `U(0, min(cap, base·2ⁿ))` "
    "seconds before retry n",
    "GatewayConfig.backoff_cap_s": "the back-off's cap (≥ `backoff_base_s`)",
    "GatewayConfig.retry_budget_min_per_s": "the retry budget's floor: this many retries a "
    "second are always allowed",
    "GatewayConfig.breaker_cooldown_s": "how long an open circuit stays open before one probe "
    "(doubled after each failed probe)",
    "GatewayConfig.keep_warm_interval_s": "`keep_warm`: seconds between two refreshes of a hot "
    "prefix",
    "Scenario.batch": "micro-batching for `map`/`submit` (a `BatchPolicy`); None → each call "
    "goes out alone",
    "Scenario.ramp": "cache warm-up and ramp window per prefix group (a `RampPolicy`); None → "
    "no prompt-cache gate",
    "Scenario.name": "the scenario's name, on spans (`gptgate.scenario`) and results",
    "Scenario.offline": "nobody waits for these calls: batch, never stream, lowest urgency",
    "BatchPolicy.max_size": "flush a micro-batch at this many items …",
    "BatchPolicy.max_wait_s": "… or this many seconds after its first item, whichever is first",
    "RampPolicy.warmup": "send one call alone on a cold prefix before the others",
    "RampPolicy.start": "calls of a prefix group in flight after its warm-up, before the hit "
    "rate has been seen",
    "RampPolicy.target_hit_rate": "the hit rate a group must hold for its window to widen",
    "RampPolicy.window": "samples per judgement of the hit rate",
    "RampPolicy.growth": "the window's factor after a good judgement",
    "RampPolicy.shrink": "the window's factor when the hit rate falls below target",
    "HedgePolicy.window_s": "seconds over which `budget_ratio` is counted",
    "Shared.url": "`redis://`, `rediss://` or `unix://` URL (a password in it is never shown)",
    "Shared.namespace": "separates fleets sharing one Redis",
    "Shared.lease_s": "how long a permit held by a process that died stays counted",
    "Shared.op_budget_s": "one Redis operation slower than this is an outage: the process "
    "falls back to its share of the limit",
}


def _comments(model: type[BaseModel]) -> dict[str, tuple[str, str]]:
    """Per field declared in ``model``'s own class body: (annotation as written, ``#:`` text)."""
    source = inspect.getsource(model)
    lines = source.splitlines()
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    found: dict[str, tuple[str, str]] = {}
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        annotation = ast.get_source_segment(source, node.annotation) or ""
        comment: list[str] = []
        row = node.lineno - 2  # the line above, 0-based
        while row >= 0 and lines[row].strip().startswith("#:"):
            comment.insert(0, lines[row].strip()[2:].strip())
            row -= 1
        found[node.target.id] = (annotation, " ".join(comment))
    return found


def _bounds(metadata: list[Any]) -> str:
    signs = {
        annotated_types.Ge: ("≥", "ge"),
        annotated_types.Gt: (">", "gt"),
        annotated_types.Le: ("≤", "le"),
        annotated_types.Lt: ("<", "lt"),
        annotated_types.MinLen: ("length ≥", "min_length"),
        annotated_types.MaxLen: ("length ≤", "max_length"),
    }
    shown = []
    for item in metadata:
        for kind, (sign, attr) in signs.items():
            if isinstance(item, kind):
                shown.append(f"{sign} {getattr(item, attr)}")
    return ", ".join(shown)


def _default(model: type[BaseModel], name: str) -> str:
    field = model.model_fields[name]
    if field.default_factory is not None:
        return f"`{field.default_factory()!r}`"  # type: ignore[call-arg]
    if field.default is PydanticUndefined:
        return "required"
    return f"`{field.default!r}`"


def _cell(text: str) -> str:
    """One table cell: on one line; a pipe inside a code span needs no escape (the tables
    extension skips code spans), one outside it would end the cell."""
    spans = text.replace("\n", " ").split("`")
    return "`".join(
        part if i % 2 else part.replace("|", "\\|") for i, part in enumerate(spans)
    )


def table(path: str) -> str:
    """The Markdown table of the model at ``path`` (``package.module.Model``)."""
    module_name, _, class_name = path.rpartition(".")
    model = getattr(importlib.import_module(module_name), class_name)
    own: dict[str, tuple[str, str]] = {}
    for klass in reversed(model.__mro__):  # fields declared in a base class too
        if isinstance(klass, type) and issubclass(klass, BaseModel) and klass is not BaseModel:
            own.update(_comments(klass))
    rows = ["| field | type | default | bounds | meaning |", "|---|---|---|---|---|"]
    for name, field in model.model_fields.items():
        annotation, comment = own.get(name, ("", ""))
        meaning = comment or NOTES.get(f"{class_name}.{name}", "")
        rows.append(
            f"| `{name}` | {_cell(f'`{annotation}`')} | {_cell(_default(model, name))} | "
            f"{_bounds(field.metadata)} | {_cell(meaning)} |"
        )
    return "\n".join(rows)


def on_config(config: Any, **_: Any) -> Any:
    """Document the tree being built: its ``gptgate`` before any installed one."""
    root = str(Path(config.config_file_path).resolve().parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    return config


def on_page_markdown(markdown: str, **_: Any) -> str:
    return _MARKER.sub(lambda match: table(match.group(1)), markdown)
