"""Every file the CLI reads may start with a UTF-8 BOM (Windows Notepad, PowerShell 5's
``Out-File -Encoding utf8``, Excel's "CSV UTF-8"), and is read as without it. Before: a
configuration file was "not valid TOML (Invalid statement (at line 1, column 1))" or "not
valid JSON (Unexpected UTF-8 BOM ...)"; a sweep.csv re-saved from Excel was "not a sweep.csv"
(its first column named ``\\ufeffconcurrency``); and a JSONL ``--prompt-file``'s first line was
sent as a plain prompt — the JSON text itself, its ``max_tokens`` ignored — with no error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gptgate.cli.measure import load_prompts
from gptgate.config_file import load_config
from gptgate.planning import bands_from_csv
from tests.test_cli_plan import FIELD_CSV

_TOML = '[[backends]]\nname = "a"\nbase_url = "http://127.0.0.1:8000/v1"\nmodel = "m"\n'
_JSON = '{"backends": [{"name": "a", "base_url": "http://127.0.0.1:8000/v1", "model": "m"}]}'
BOM = b"\xef\xbb\xbf"


def _saved_with_bom(path: Path, text: str) -> Path:
    path.write_bytes(BOM + text.replace("\n", "\r\n").encode())
    return path


@pytest.mark.parametrize(("name", "text"), [("g.toml", _TOML), ("g.json", _JSON),
                                            ("g.conf", _TOML), ("g.cfg", _JSON)])
def test_a_config_file_with_a_utf8_bom_is_read(tmp_path: Path, name: str, text: str) -> None:
    config = load_config(_saved_with_bom(tmp_path / name, text))
    assert [b.name for b in config.backends] == ["a"]


def test_a_sweep_csv_with_a_utf8_bom_is_read(tmp_path: Path) -> None:
    bands = bands_from_csv(_saved_with_bom(tmp_path / "sweep.csv", FIELD_CSV))
    assert len(bands) == 3


def test_a_jsonl_prompt_file_with_a_utf8_bom_keeps_its_first_item(tmp_path: Path) -> None:
    item = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 7}
    path = _saved_with_bom(tmp_path / "prompts.jsonl", f"{json.dumps(item)}\nplain prompt\n")
    first, second = load_prompts(str(path))
    assert first == item
    assert second["messages"] == [{"role": "user", "content": "plain prompt"}]
