"""The ``gptgate`` command line: one module per command, registered in ``COMMANDS``.

Adding a command is one entry: a :class:`~gptgate.cli.common.Command` with its name, a
one-line summary, ``add_arguments(parser)`` and ``run(args) -> exit code``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import pydantic

from ..errors import GateError
from ..profiling import add_profile_arguments, run_profile
from . import batch, demo, plan, sim, sweep
from .common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    Command,
    Parser,
    one_line,
    wrapped,
)

__all__ = ["COMMANDS", "Command", "build_parser", "main"]

#: every ``gptgate`` subcommand, in the order ``--help`` lists them
COMMANDS: tuple[Command, ...] = (
    demo.COMMAND,
    sweep.COMMAND,
    plan.COMMAND,
    Command(
        "profile", "baseline each backend by concurrency band", add_profile_arguments, run_profile
    ),
    sim.COMMAND,
    batch.COMMAND,
)

DESCRIPTION = """\
gptgate: a client-side gateway for OpenAI-compatible chat APIs.

Measure where throughput peaks for your workload (demo, sweep), plan capacity from what a
call really costs at each concurrency (plan), keep a per-backend baseline that a gateway
watches for drift (profile), and rehearse against a simulated backend that
fails the way real ones do (sim serve); run offline jobs through a provider's Batch API
at the batch price (batch). No key is needed on the built-in simulator.
"""

EPILOG = """\
examples:
  gptgate demo
  gptgate sweep --sim hosted --requests 300 --out runs/hosted
  gptgate plan --budget 10/h --from runs/hosted/sweep.csv
  gptgate profile --config gptgate.toml --out baseline.json
  gptgate sim serve --profile gpu --port 8000 --error-rate 0.02
  gptgate batch submit items.jsonl --config gateway.toml --job-dir jobs/nightly

'gptgate COMMAND --help' shows each command's options and examples.
exit codes: 0 done, 1 a failed run, 2 bad usage, 130 interrupted (Ctrl-C)
"""


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    parser = Parser(
        prog="gptgate",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"gptgate {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in commands:
        sub = subparsers.add_parser(
            command.name,
            help=command.summary,
            description=wrapped(command.description or command.summary),
            epilog=command.examples or None,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.add_arguments(sub)
        sub.set_defaults(run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code (errors are one line on stderr)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help (0) or bad usage (2, already printed)
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    try:
        code: int = args.run(args)
    except CliError as error:
        _error(error)
        return error.exit_code
    except KeyboardInterrupt:
        print("gptgate: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except pydantic.ValidationError as error:  # a value the library refused
        _error(error)
        return EXIT_USAGE
    except (GateError, RuntimeError, OSError) as error:  # a missing extra, a failed call
        _error(error)
        return EXIT_FAILED
    return code


def _error(error: BaseException) -> None:
    print(f"gptgate: {one_line(error)}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
