"""What every command shares: its errors and exit codes, argument types, the lazy extras.

Exit codes: 0 done, 1 a run that failed (every call failed, a file could not be written),
2 bad usage (an option out of range, a missing key), 130 interrupted by Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "CliError",
    "Command",
    "Parser",
    "RunFailed",
    "UsageError",
    "add_json_flag",
    "listen_port",
    "non_negative_float",
    "one_line",
    "out_problem",
    "port_number",
    "positive_float",
    "positive_int",
    "print_json",
    "rate",
    "require_extra",
    "wrapped",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
#: 128 + SIGINT, what a shell reports for a program stopped by Ctrl-C
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A failure the user gets as one line on stderr, with ``exit_code``."""

    exit_code = EXIT_FAILED


class UsageError(CliError):
    """The command line asks for something impossible (exit 2)."""

    exit_code = EXIT_USAGE


class RunFailed(CliError):
    """The command ran and failed: every call failed, a file could not be written (exit 1)."""

    exit_code = EXIT_FAILED


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand: ``gptgate NAME``. Registering it is one entry in ``COMMANDS``.

    ``add_arguments(parser)`` declares its options; ``run(args)`` does the work and returns
    the exit code (or raises :class:`CliError`). ``examples`` is shown under ``--help``.
    """

    name: str
    summary: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str = ""
    examples: str = ""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (no usage dump) and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {one_line(message)} (see '{self.prog} --help')\n")


def one_line(text: object) -> str:
    """``text`` on one line: a multi-line message (a validation dump) keeps its first line
    that says something, the rest is dropped."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    if not lines:
        return str(text).strip() or "unknown error"
    # pydantic: "1 validation error for Backend" / "base_url" / "  Value error, <why> [type=..."
    for line in lines:
        if line.startswith("Value error, "):
            return line.removeprefix("Value error, ").split(" [type=")[0]
    return lines[0]


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    value = _finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    value = _finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def rate(text: str) -> float:
    """An argparse type: a share of requests within [0, 1]."""
    value = _finite(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be within 0 and 1, got {text}")
    return value


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 1-65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1-65535, got {value}")
    return value


def listen_port(text: str) -> int:
    """An argparse type: a TCP port to listen on, 0-65535 (0: the system picks a free one)."""
    if text.strip() == "0":
        return 0
    return port_number(text)


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def out_problem(path: Path, *, directory: bool) -> str | None:
    """Why a command could never write its output at ``path`` (``directory``: a folder it
    creates, else a file it replaces), or None. Asked before a run sends anything: a run
    that measures and bills, then cannot keep what it measured, loses both."""
    if directory:
        if os.path.exists(path) and not os.path.isdir(path):
            return "exists and is not a directory"
        where = path
        while not os.path.exists(where) and where != where.parent:
            where = where.parent  # the nearest folder that exists: the run creates the rest
        if not os.path.isdir(where):
            return f"cannot be created, {where} is not a directory"
    else:
        where = path.parent
        if os.path.isdir(path) or not os.path.isdir(where):
            return "not a file in an existing directory"
    if not os.access(where, os.W_OK | os.X_OK):
        return f"{where} is not writable"
    return None


def add_json_flag(
    parser: argparse.ArgumentParser,
    what: str = "print one JSON object on stdout instead of the table (errors stay on stderr)",
) -> None:
    parser.add_argument("--json", action="store_true", help=what)


def wrapped(text: str, width: int = 88) -> str:
    """A description for ``--help``: its paragraphs wrapped (the raw formatter keeps the
    examples' layout, so it does not wrap anything itself)."""
    import textwrap

    return "\n\n".join(textwrap.fill(" ".join(p.split()), width) for p in text.split("\n\n"))


def print_json(payload: dict[str, Any]) -> None:
    """Machine-readable output: one JSON document on stdout (NaN written as null)."""
    print(json.dumps(_finite_json(payload), indent=2, ensure_ascii=False))


def _finite_json(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def require_extra(module: str, what: str) -> ModuleType:
    """Import an optional dependency of the ``cli`` extra, or fail with one line saying how
    to get it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise RunFailed(
            f"{what} needs {module.split('.')[0]}: pip install 'gptgate[cli]'"
        ) from None


def warn(message: str) -> None:
    print(f"gptgate: {message}", file=sys.stderr)
