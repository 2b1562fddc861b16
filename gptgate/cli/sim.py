"""``gptgate sim serve``: the simulated backend over HTTP, with the faults to rehearse against."""

from __future__ import annotations

import argparse
import json
import socket
from dataclasses import asdict

from ..sim.faults import FaultPlan
from ..sim.openai_batches import SimBatchPlan
from .common import (
    EXIT_OK,
    Command,
    RunFailed,
    UsageError,
    add_json_flag,
    listen_port,
    non_negative_float,
    positive_float,
    rate,
    wrapped,
)

__all__ = ["COMMAND"]

EXAMPLES = """\
examples:
  gptgate sim serve                                  # the 'gpu' profile on 127.0.0.1:8000
  gptgate sim serve --profile hosted --port 8010 --time-scale 10
  # rehearse: 2% 5xx, 1% connection resets, 1% 5-second stalls, a 3 s 429 storm every 30 s
  gptgate sim serve --error-rate 0.02 --reset-rate 0.01 --stall-rate 0.01 --stall-s 5 \\
      --storm-every 30 --storm-s 3

Then point a client at http://127.0.0.1:8000/v1 (any model name, any key). Ctrl-C stops it.
One request can also script its own fault with the header x-sim-fault: 500, 503, 429, reset,
drop, stall[=SECONDS], loris, endless or garbage.

exit codes: 0 stopped by Ctrl-C, 1 cannot listen (port in use), 2 bad usage
"""

#: option → FaultPlan field: the random faults a request may draw
_FAULT_RATES = {
    "error_rate": "answer 500 or 503 (evenly) at once",
    "reset_rate": "drop the connection mid-body (mid-stream for SSE)",
    "drop_rate": "drop the connection before any response (nothing billed)",
    "stall_rate": "pause the response for --stall-s seconds",
    "loris_rate": "never send the first byte (the client must give up)",
    "endless_rate": "never end the response",
    "garbage_rate": "send malformed JSON, or one malformed SSE event",
}


#: FaultPlan field → the option that sets it, longest first (for its error messages)
_OPTIONS = {
    "storm_every_s": "--storm-every",
    "storm_s": "--storm-s",
    "stall_s": "--stall-s",
    **{name: f"--{name.replace('_', '-')}" for name in _FAULT_RATES},
}


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default="gpu",
                        help="hosted, tpu, gpu, cpu, llamacpp, or a provider's dialect: "
                        "anthropic, azure, deepseek (default: gpu)")
    parser.add_argument("--host", default="127.0.0.1", help="default: 127.0.0.1")
    parser.add_argument("--port", type=listen_port, default=8000,
                        help="1-65535, or 0 for a free one (printed; default: 8000)")
    parser.add_argument("--time-scale", type=positive_float, default=1.0, metavar="X",
                        help="run simulated time X times faster than the wall clock "
                        "(default: 1)")
    parser.add_argument("--seed", type=int, default=0, help="default: 0")
    faults = parser.add_argument_group(
        "faults", "random failures per request (shares within 0-1, adding up to at most 1)"
    )
    for name, what in _FAULT_RATES.items():
        faults.add_argument(f"--{name.replace('_', '-')}", type=rate, default=0.0,
                            metavar="SHARE", help=what)
    faults.add_argument("--stall-s", type=non_negative_float, default=30.0, metavar="S",
                        help="how long a stall lasts (default: 30)")
    faults.add_argument("--storm-every", type=non_negative_float, default=0.0, metavar="S",
                        help="a 429 storm starts every S simulated seconds (default: none)")
    faults.add_argument("--storm-s", type=non_negative_float, default=0.0, metavar="S",
                        help="a storm lasts S seconds: every request gets 429 with a "
                        "retry-after to its end")
    batch = parser.add_argument_group("batch API", "how /v1/batches runs a job")
    batch.add_argument("--batch-complete-s", type=non_negative_float, default=60.0,
                       metavar="S", help="simulated seconds a batch takes (default: 60)")
    batch.add_argument("--batch-fail-rate", type=rate, default=0.0, metavar="SHARE",
                       help="each batch item's chance of a 500 (default: 0)")
    batch.add_argument("--batch-expire-rate", type=rate, default=0.0, metavar="SHARE",
                       help="each batch item's chance of expiring unrun (default: 0)")
    add_json_flag(parser, "print the address and settings as one JSON line before serving")


def fault_plan(args: argparse.Namespace) -> FaultPlan:
    rates = {name: getattr(args, name) for name in _FAULT_RATES}
    try:
        return FaultPlan(seed=args.seed, stall_s=args.stall_s, storm_every_s=args.storm_every,
                         storm_s=args.storm_s, **rates)
    except ValueError as exc:
        message = str(exc)
        for field, option in _OPTIONS.items():
            message = message.replace(field, option)
        raise UsageError(message) from None


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before serving: a taken port is one line, not a server
    log, and port 0 is known (the system's pick) before the address is printed."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        raise RunFailed(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def serve(args: argparse.Namespace) -> int:
    from ..sim import get_profile
    from ..sim import serve as serve_sim
    from ..sim.server import _uvicorn

    try:
        profile = get_profile(args.profile)
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from None
    faults = fault_plan(args)
    # a missing ``sim`` extra fails before the address is printed: a script reads that line
    # as "served" and goes on
    _uvicorn()
    listening = _listen(args.host, args.port)
    port = listening.getsockname()[1]
    # the base_url each provider's preset and SDK take: the server root for these three
    root = profile.flavor in ("anthropic", "azure", "deepseek")
    base_url = f"http://{args.host}:{port}" + ("" if root else "/v1")
    info = {"base_url": base_url, "profile": args.profile, "time_scale": args.time_scale,
            "faults": asdict(faults)}
    if args.json:
        print(json.dumps(info), flush=True)
    else:
        print(f"serving the '{args.profile}' simulator at {base_url} (time x{args.time_scale:g});"
              " Ctrl-C stops it", flush=True)
    batches = SimBatchPlan(complete_after_s=args.batch_complete_s,
                           fail_rate=args.batch_fail_rate, expire_rate=args.batch_expire_rate,
                           seed=args.seed)
    serve_sim(args.profile, host=args.host, port=port, time_scale=args.time_scale,
              seed=args.seed, faults=faults, batches=batches, listening=listening)
    return EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="sim_command", required=True, metavar="COMMAND")
    serve_parser = commands.add_parser(
        "serve",
        help="serve the simulator over HTTP",
        description=wrapped("Serve a simulated OpenAI-compatible backend over HTTP, with "
                            "random faults and 429 storms to rehearse against."),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_serve_arguments(serve_parser)
    serve_parser.set_defaults(sim_run=serve)


def run(args: argparse.Namespace) -> int:
    result: int = args.sim_run(args)
    return result


COMMAND = Command(
    name="sim",
    summary="the simulated backend (sim serve)",
    description="The built-in simulator of OpenAI-compatible backends.",
    add_arguments=add_arguments,
    run=run,
    examples="examples:\n  gptgate sim serve --profile hosted --port 8000\n",
)
