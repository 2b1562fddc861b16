"""The documentation stands alone and the site builds strict (CI runs the same build)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: files the readers get: none may send them to documents the repository does not hold
#: (the CLI is being rewritten elsewhere and checked there)
_READ = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))] + [
    path
    for folder in ("gptgate", "benchmarks")
    for path in sorted((ROOT / folder).rglob("*.py"))
    if not path.relative_to(ROOT).as_posix().startswith("gptgate/cli")
]


def test_docs_cite_no_document_outside_the_repository() -> None:
    cited = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _READ
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"SEEDS|DESIGN\.md", line)
    ]
    assert cited == []


def test_config_reference_is_generated_from_the_source() -> None:
    spec = importlib.util.spec_from_file_location(
        "config_reference", ROOT / "docs" / "_hooks" / "config_reference.py"
    )
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = hook.on_page_markdown("<!-- fields: gptgate.config.GatewayConfig -->")
    import gptgate as gg

    for name in gg.GatewayConfig.model_fields:
        assert f"| `{name}` |" in page
    # the type as written, the default, the bounds and the ``#:`` comment above the field
    assert "| `max_attempts` | `StrictInt` | `3` | ≥ 1, ≤ 20 | tries per call, the first" in page
    # a pipe inside a code span stays in its cell
    assert "| `deadline_s` | `StrictFloat | None` | `None` | > 0 |" in page


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None
    or importlib.util.find_spec("mkdocstrings_handlers") is None,
    reason="the docs extra is not installed (pip install -e '.[docs]')",
)
def test_site_builds_strict(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "api" / "index.html").read_text(encoding="utf-8").count(
        'id="gptgate.Gateway.chat"'
    ) == 1
    assert (tmp_path / "img" / "adaptive.png").exists()
