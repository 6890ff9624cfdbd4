"""The `farm` entry point: composes the command groups and is the one place errors become exit codes.

Whatever goes wrong, a command ends with one line on stderr, `error: <what> (<what to do>)`,
and an exit code of foundation.errors (1 job failed, 2 bad input, 3 not found, 4 unreachable,
5 timed out, 6 out of resources, 70 internal error, 130/143 interrupted; 141, silently, for a closed
stdout); with --json it also prints `{"error": ..., "hint": ..., "exit_code": ...}` on stdout, so a
script reading stdout always gets a document. click's own usage errors are bad input like any other.
A daemon that logs JSON lines (`--log-format json`) writes that line as one more JSON record, at level
error.
"""

from __future__ import annotations

import json
import os
import sys

import typer
from typer.utils import parse_boolean_env_var

from farm.cli import agent_cmd, cluster, coordinator_cmd, export_cmd, info, job_watch, registry, report_cmd, submit
from farm.cli.options import read_deprecated_envvars
from farm.cli.output import write_error
from foundation.errors import (
    EXIT_INTERNAL,
    BadInput,
    FarmError,
    Interrupted,
    out_of_resources,
    path_error,
    shortened,
)
from foundation.processes.heap import tune_collector

# `farm --help` ends with the exit codes (README, "Exit codes"); \b keeps click from rewrapping them.
EXIT_CODES_HELP = """Exit codes:

\b
  0        success
  1        the job ran and failed, or was cancelled
  2        bad input (a value, a name, a usage error)
  3        not found (a file, job, artifact, fingerprint, registry)
  4        unreachable (the registry, coordinator or tracker)
  5        gave up waiting (--timeout); the job goes on
  6        out of resources (disk full, process or file limit)
  70       internal error: a bug in tvm-farm (FARM_DEBUG=1 shows it)
  130/143  interrupted by SIGINT/SIGTERM
  141      stdout closed before all was written (| head)
"""

# rich_markup_mode=None: typer's rich help and usage errors import rich.markdown and pygments,
# ~0.5 s before `farm --help` prints anything (bench/startup.py); click's plain help is enough.
# help_option_names reach every command below: contexts inherit them.
app = typer.Typer(
    name="farm",
    help="tvm-farm: shared, incremental tuning for Apache TVM. Tune once per hardware fingerprint, reuse everywhere.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
# Groups added without a name contribute their commands at the top level.
app.add_typer(submit.app)
app.add_typer(export_cmd.app)
app.add_typer(info.app)
app.add_typer(cluster.app)
app.add_typer(job_watch.app)
app.add_typer(coordinator_cmd.app)
app.add_typer(agent_cmd.app)
app.add_typer(report_cmd.app)
app.add_typer(registry.app, name="registry",
              help="Create, inspect, import into, export from, prune and upgrade the registry.")

DEBUG_ENV = "FARM_DEBUG"
INTERRUPTED_BY_TYPER = 130
EXIT_STDOUT_CLOSED = 128 + 13  # SIGPIPE


def _stdout_identity() -> tuple[int, int] | None:
    try:
        status = os.fstat(1)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def _stdout_closed(identity_before: tuple[int, int] | None) -> bool:
    """Whether a write met a closed stdout and typer or rich ended the command for it: typer
    swaps in click's wrapper that ignores the broken pipe at exit (typer.core, on EPIPE), rich
    points fd 1 at /dev/null (Console.on_broken_pipe). No command exits by itself."""
    return type(sys.stdout).__name__ == "PacifyFlushWrapper" or _stdout_identity() != identity_before


def _print_version(asked: bool) -> None:
    if asked:
        sys.stdout.write(info.versions_text())
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_print_version,
                                 help="Print the versions of farm, TVM, LLVM and CUDA (when present), and exit."),
) -> None:
    """tvm-farm: shared, incremental tuning for Apache TVM. Tune once per hardware fingerprint, reuse everywhere."""
    from foundation.config import check_switches, env_flag

    # Before any command reads its options: an old variable name sets the option as its new one.
    read_deprecated_envvars(os.environ, _warn)
    # A mistyped yes/no variable stops the command here, not a worker deep in a job (`off` was on).
    check_switches()
    env_flag(DEBUG_ENV, False)


def _warn(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def main() -> None:
    """Run the command line; every failure is one line on stderr and its exit code."""
    # gRPC's core logs a failed TLS handshake (and more) at INFO on stderr, beside the one line
    # the failure becomes here; ERROR keeps what is a real fault. Before gRPC starts: it reads it once.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    # A command that imports TVM makes ~200,000 objects that live as long as it does; with
    # Python's default thresholds the import alone ran six full collections (0.3-0.5 s).
    tune_collector()
    json_output = "--json" in sys.argv[1:sys.argv.index("--")] if "--" in sys.argv else "--json" in sys.argv[1:]
    json_output = json_output or parse_boolean_env_var(os.environ.get("FARM_JSON"), False)
    stdout_before = _stdout_identity()
    try:
        code = app(standalone_mode=False)
    except SystemExit:
        if _stdout_closed(stdout_before):
            # typer ends a write to a closed pipe (`farm registry ls | head -1`) with 1, the code
            # of a failed job; it is the reader's choice, said as a shell says SIGPIPE's end.
            sys.exit(EXIT_STDOUT_CLOSED)
        raise
    except FarmError as err:
        _fail(err, json_output)
    except typer.TyperException as err:  # click's usage errors (typer's copy of click)
        if type(err).__name__ == "NoArgsIsHelpError":  # `farm registry` alone: its help, not an error
            sys.stdout.write(err.format_message().rstrip() + "\n")
            sys.exit(0)
        _fail(_usage_error(err), json_output)
    except (typer.Abort, KeyboardInterrupt):
        _fail(Interrupted("interrupted", "nothing was left half-written"), json_output)
    except OSError as err:  # on a path no command checked itself: its path and what to do
        if err.filename is None or _debugging():
            _raise_or_fail(err, json_output)
        _fail(path_error(err), json_output)
    except Exception as err:
        _raise_or_fail(err, json_output)
    if code == INTERRUPTED_BY_TYPER:
        # typer turns a KeyboardInterrupt inside a command into this code, silently; no command
        # returns it itself (farm submit's own interruption is an Interrupted error).
        _fail(Interrupted("interrupted", "nothing was left half-written"), json_output)
    sys.exit(code if isinstance(code, int) else 0)


def _raise_or_fail(err: Exception, json_output: bool) -> None:
    """An unexpected error: its traceback with FARM_DEBUG set, else one line and exit 70; the box
    out of disk, open files or processes (exit 6), wherever it was met, is no bug."""
    if _debugging():
        raise err
    cause: BaseException | None = err
    while cause is not None:
        resources = out_of_resources(cause)
        if resources is not None:
            _fail(resources, json_output)
        cause = cause.__cause__ or cause.__context__
    _fail(_internal(err), json_output, EXIT_INTERNAL)


def _fail(err: FarmError, json_output: bool, exit_code: int | None = None) -> None:
    code = err.exit_code if exit_code is None else exit_code
    if json_output:
        sys.stdout.write(json.dumps({**err.to_json(), "exit_code": code}, indent=2, default=str) + "\n")
        sys.stdout.flush()
    # One line, whatever the message held, and no value in it quoted whole (a 5,000-character id).
    write_error(shortened(" ".join(str(err).split())))
    if isinstance(err, Interrupted):
        # Everything is committed and said: skip the interpreter's teardown, which would put the
        # signals back to their defaults while worker pools wind down, so another Ctrl-C then
        # would kill the process instead of ending it with 130/143.
        os._exit(code)
    sys.exit(code)


def _debugging() -> bool:
    """FARM_DEBUG, read while an error is being reported: a value that is neither yes nor no
    (refused as the command started) counts as yes rather than raise again."""
    from foundation.config import env_flag

    try:
        return env_flag(DEBUG_ENV, False)
    except FarmError:
        return True


def _usage_error(err: typer.TyperException) -> BadInput:
    ctx = getattr(err, "ctx", None)
    command = ctx.command_path if ctx is not None else "farm"
    negative = _negative_number(err)
    if negative is not None:
        return negative
    problem, _, suggestion = err.format_message().partition(" (Possible options: ")
    hint = f"see `{command} --help`"
    if suggestion:
        hint = f"did you mean {suggestion.rstrip(')')}? {hint}"
    return BadInput(_sentence(problem), hint)


def _negative_number(err: typer.TyperException) -> BadInput | None:
    """click reads `-3` as an option it does not know; where a command takes a number, it is
    one given negative (`farm submit mlp-tiny llvm -3`)."""
    import re

    name = getattr(err, "option_name", None) or ""
    ctx = getattr(err, "ctx", None)
    if type(err).__name__ != "NoSuchOption" or not re.fullmatch(r"-\d+(\.\d*)?", name):
        return None
    arguments = [p.name for p in (ctx.command.params if ctx is not None else []) if p.param_type_name == "argument"]
    what = "batch" if "batch" in arguments else "that number"
    return BadInput(f"{what} must be a positive integer, not {name[:24]}",
                    f"see `{ctx.command_path if ctx is not None else 'farm'} --help`")


def _internal(err: Exception) -> FarmError:
    return FarmError(f"internal error: {type(err).__name__}: {err}",
                     f"this is a bug in tvm-farm; run again with {DEBUG_ENV}=1 for the traceback and report it")


def _sentence(message: str) -> str:
    """click's "Missing argument 'MODEL'." as this CLI's messages read: "missing argument 'MODEL'"."""
    message = " ".join(message.split()).rstrip(".")
    if message[:2].istitle():
        message = message[0].lower() + message[1:]
    return message


if __name__ == "__main__":  # pragma: no cover
    main()
