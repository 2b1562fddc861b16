"""``load_config(path)``: a :class:`GatewayConfig` from a TOML or JSON file (for the CLI).

The file holds ``GatewayConfig`` fields, backends included::

    max_attempts = 3

    [[backends]]
    name = "gpu-a"
    base_url = "http://127.0.0.1:8000/v1"
    model = "llama-3-8b"
    hardware = "gpu"

A file that cannot be used is a :class:`ConfigFileError`: one line naming the path, and for a
value pydantic refuses, the field (``backends.0.base_url: ...``). API keys belong in the
environment (``api_key_env``), not in the file; a key that is there never shows in an error.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .baseline import one_line
from .config import GatewayConfig

__all__ = ["ConfigFileError", "load_config"]


class ConfigFileError(ValueError):
    """A configuration file that cannot be used: its message is one line naming the path."""


def load_config(path: str | os.PathLike[str]) -> GatewayConfig:
    """Read a ``.toml`` or ``.json`` file of :class:`GatewayConfig` fields (another suffix
    is read as TOML, then JSON)."""
    where = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # a BOM, as Windows editors write
    except FileNotFoundError:
        raise ConfigFileError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise ConfigFileError(f"{where}: is a directory, not a configuration file") from None
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise ConfigFileError(f"{where}: cannot read it ({reason})") from None
    document = _decode(text, where, Path(path).suffix.lower())
    if not isinstance(document, dict):
        raise ConfigFileError(f"{where}: expected a table of GatewayConfig fields at the top")
    try:
        return GatewayConfig.model_validate(document)
    except ValidationError as error:
        raise ConfigFileError(f"{where}: {one_line(error)}") from None


def _decode(text: str, where: str, suffix: str) -> Any:
    if suffix == ".json":
        return _json(text, where)
    if suffix == ".toml":
        return _toml(text, where)
    try:
        return _toml(text, where)
    except ConfigFileError:
        try:
            return json.loads(text)
        except ValueError:
            raise ConfigFileError(f"{where}: neither TOML nor JSON") from None


def _json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise ConfigFileError(f"{where}: not valid JSON ({_flat(error)})") from None


def _toml(text: str, where: str) -> Any:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigFileError(f"{where}: not valid TOML ({_flat(error)})") from None


def _flat(error: Exception) -> str:
    return " ".join(str(error).split())
