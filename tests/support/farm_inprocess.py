"""`farm` commands run inside the test's process: the real console script, minus a process start.

A `farm` subprocess pays ~1 CPU-second of interpreter and imports (sqlalchemy, alembic, NumPy;
TVM another second) before it reads its arguments. Tests about what a command says and returns
(bad input, exit codes, `--json` documents) need none of that: ``run_farm_inprocess`` executes
the installed `farm` script itself (runpy, as `__main__`, so click names the program `farm` as in
a shell), with ``sys.argv``, the environment and file descriptors 1 and 2 set as a subprocess
would have them, and returns what the process would have: its exit code, stdout and stderr.

Output is captured at the file descriptors, so what native code (TVM, LLVM, gRPC's core) writes
on stderr is seen too. What only a process shows stays with subprocess tests: signals, output at
interpreter start or teardown, warnings printed while modules are first imported, `os._exit`
(the Interrupted path; calling it here raises instead of ending the test run).
"""

from __future__ import annotations

import logging
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

# What a fresh interpreter runs with (Python's default warning filters): what it would print.
_PROCESS_WARNING_FILTERS = [
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, ""),
    ("ignore", PendingDeprecationWarning, ""),
    ("ignore", ImportWarning, ""),
    ("ignore", ResourceWarning, ""),
]


def farm_script() -> Path:
    """The installed `farm` console script of the interpreter running the tests."""
    return Path(sys.executable).with_name("farm")


class ProcessExitInTest(AssertionError):
    """A command called os._exit: only a real process can be tested on that path."""


def run_farm_inprocess(*args: str, home: Path, env: Mapping[str, str | None] | None = None
                       ) -> subprocess.CompletedProcess:
    """`farm *args` with FARM_HOME=home (FARM_REGISTRY unset, as support.farm_process.farm_env),
    ``env`` on top (None removes a variable); the exit code, stdout and stderr of the run."""
    overrides: dict[str, str | None] = {"FARM_HOME": str(home), "FARM_REGISTRY": None, **(env or {})}
    script = farm_script()
    with _environment(overrides), _global_state(), _captured_fds() as (out, err):
        sys.argv = [str(script), *args]
        try:
            runpy.run_path(str(script), run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = _exit_status(exc.code)
    return subprocess.CompletedProcess(["farm", *args], code, out.text, err.text)


def _exit_status(code: object) -> int:
    """What the shell sees for sys.exit(code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")  # sys.exit("message"): printed, exit 1
    return 1


@contextmanager
def _environment(overrides: Mapping[str, str | None]) -> Iterator[None]:
    saved = dict(os.environ)
    for name, value in overrides.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        yield
    finally:  # also undoes what the command set itself (GRPC_VERBOSITY, TVM_NUM_THREADS)
        os.environ.clear()
        os.environ.update(saved)


@contextmanager
def _global_state() -> Iterator[None]:
    """sys.argv, the root logger, warnings and os._exit as a fresh process has them; put back after,
    with the signal handlers a command may have installed."""
    argv, root = list(sys.argv), logging.getLogger()
    handlers, level = list(root.handlers), root.level
    signal_handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    real_exit = os._exit

    def refuse_exit(code: int) -> None:
        raise ProcessExitInTest(f"the command called os._exit({code}): test this path with a real `farm` process")

    os._exit = refuse_exit
    try:
        with warnings.catch_warnings():
            warnings.resetwarnings()
            for action, category, module in reversed(_PROCESS_WARNING_FILTERS):
                warnings.filterwarnings(action, category=category, module=module)
            warnings.showwarning = _show_on_stderr
            yield
    finally:
        os._exit = real_exit
        sys.argv = argv
        for sig, handler in signal_handlers.items():
            signal.signal(sig, handler)
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
        for handler in handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(level)


def _show_on_stderr(message, category, filename, lineno, file=None, line=None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


class _Captured:
    text = ""


@contextmanager
def _captured_fds() -> Iterator[tuple[_Captured, _Captured]]:
    """fds 1 and 2 (and sys.stdout, sys.stderr on them) pointed at files; their text after."""
    captured = (_Captured(), _Captured())
    files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    streams = (sys.stdout, sys.stderr)
    for stream in streams:
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    opened = []
    try:
        for fd, file in zip((1, 2), files):
            os.dup2(file.fileno(), fd)
        opened = [os.fdopen(os.dup(fd), "w", buffering=1, encoding="utf-8", errors="replace") for fd in (1, 2)]
        sys.stdout, sys.stderr = opened
        yield captured
    finally:
        for stream in opened:
            stream.close()
        sys.stdout, sys.stderr = streams
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)
        for holder, file in zip(captured, files):
            file.seek(0)
            holder.text = file.read().decode("utf-8", errors="replace")
            file.close()
