"""docs/cli.md says what each `gptgate` command takes: every option of a command's parser is
named in its section, every option its section names is one the command has, and a default
the option tables give is the parser's. Read from the parser itself (gptgate.cli.build_parser),
so it is fast and needs no run. (`gptgate sweep --seed` and `--quiet`, and `plan`'s `--quiet`,
were missing from their sections.)"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

from gptgate.cli import build_parser

PAGE = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
OPTION = re.compile(r"(?<![\w-])--[a-z][\w-]*")


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[
    tuple[str, argparse.ArgumentParser]
]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, f"{prefix} {name}".strip())
    if prefix and not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        yield prefix, parser


def _sections() -> dict[str, str]:
    """``## `gptgate demo` `` → that section's text, up to the next ``## ``."""
    found = {}
    for part in re.split(r"\n## ", PAGE.read_text(encoding="utf-8")):
        title = re.match(r"`gptgate ([\w ]+)`", part)
        if title:
            found[title.group(1).strip()] = part
    return found


def _section(command: str, sections: dict[str, str]) -> str:
    """A command's section: its own, else its group's (`batch submit` is under `batch`)."""
    words = command.split()
    for end in range(len(words), 0, -1):
        if " ".join(words[:end]) in sections:
            return sections[" ".join(words[:end])]
    raise AssertionError(f"docs/cli.md has no section for `gptgate {command}`")


def _options(parser: argparse.ArgumentParser) -> dict[str, object]:
    return {option: action.default for action in parser._actions
            for option in action.option_strings if option.startswith("--") and option != "--help"}


COMMANDS = list(_commands(build_parser()))


def test_every_command_is_read() -> None:
    assert {"demo", "sweep", "plan", "profile", "sim serve", "batch submit"} <= {
        name for name, _ in COMMANDS}


def test_each_option_of_a_command_is_named_in_its_section() -> None:
    sections = _sections()
    missing = [f"gptgate {name} {option}" for name, parser in COMMANDS
               for option in _options(parser) if option not in _section(name, sections)]
    assert missing == []


def test_each_option_a_section_names_is_one_its_command_has() -> None:
    sections = _sections()
    taken: dict[str, set[str]] = {}
    for name, parser in COMMANDS:
        key = next(k for k in sorted(sections, key=len, reverse=True)
                   if name == k or name.startswith(k + " "))
        taken.setdefault(key, set()).update(_options(parser))
    unknown = []
    for key, text in sections.items():
        # a line that runs another command (the rehearsal's `gptgate sweep ...`) is its own
        own = "\n".join(line for line in text.splitlines()
                        if not re.search(rf"gptgate (?!{key}\b)[a-z]", line))
        unknown += [f"{key}: {option}" for option in sorted(set(OPTION.findall(own)))
                    if option not in taken[key]]
    assert unknown == []


def _same(documented: str, default: object) -> bool | None:
    """Whether a table's default cell says the parser's default; None: the cell is prose."""
    text = documented.strip().strip("`")
    if default is None or isinstance(default, bool) or text in ("none", "—", ""):
        return None
    try:
        return float(text.replace(",", "")) == float(str(default))
    except ValueError:
        return text == str(default) if re.fullmatch(r"[\w.,/-]+", text) else None


def test_a_default_the_tables_give_is_the_parsers() -> None:
    sections = _sections()
    wrong = []
    for name, parser in COMMANDS:
        defaults = _options(parser)
        for row in re.finditer(r"^\| (`--[^|]*)\| ([^|]*)\|", _section(name, sections), re.M):
            options = OPTION.findall(row.group(1))
            cells = row.group(2).split(", ") if len(options) > 1 else [row.group(2)]
            if len(cells) != len(options):
                cells = [row.group(2)] * len(options)  # one default for all of them
            for option, cell in zip(options, cells, strict=True):
                if option in defaults and _same(cell, defaults[option]) is False:
                    wrong.append(f"gptgate {name} {option}: docs say {cell.strip()!r}, "
                                 f"the parser {defaults[option]!r}")
    assert wrong == []


def test_the_default_check_can_fail() -> None:
    assert _same("`1000`", 1000) is True
    assert _same("200", 400) is False
    assert _same("`gpu`", "hosted") is False
    assert _same("the profile's model", None) is None
