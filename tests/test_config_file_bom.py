"""A configuration file saved with a UTF-8 BOM (Windows Notepad, PowerShell 5's ``Out-File
-Encoding utf8``) is read like any other, TOML or JSON; before, ``gptgate profile`` / ``batch``
refused it: "not valid TOML (Invalid statement (at line 1, column 1))", "not valid JSON
(Unexpected UTF-8 BOM ...)"."""

from __future__ import annotations

from pathlib import Path

import pytest

from gptgate.config_file import load_config

_TOML = '[[backends]]\nname = "a"\nbase_url = "http://127.0.0.1:8000/v1"\nmodel = "m"\n'
_JSON = '{"backends": [{"name": "a", "base_url": "http://127.0.0.1:8000/v1", "model": "m"}]}'


@pytest.mark.parametrize(("name", "text"), [("g.toml", _TOML), ("g.json", _JSON),
                                            ("g.conf", _TOML), ("g.cfg", _JSON)])
def test_a_config_file_with_a_utf8_bom_is_read(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    config = load_config(path)
    assert [b.name for b in config.backends] == ["a"]
