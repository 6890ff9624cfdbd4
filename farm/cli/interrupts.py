"""SIGINT and SIGTERM as cancel requests while a command runs a job in this process.

Python's default turns SIGINT into a KeyboardInterrupt raised wherever the main thread is,
which inside a TVM call is a C++ exception path that ends in std::terminate (a segfault);
and SIGTERM just kills the process, leaving its job `running`. Here the first signal only
sets the job's cancel request: the tuner stops after the batch in flight, the job ends
`cancelled`, and the command exits 128 + the signal. A second signal stops at once: the job
is marked cancelled if the registry answers within a moment (its process's death is enough
for the next reader otherwise), and the process exits.

The signals are handled on a thread of their own, woken through Python's signal wakeup fd:
Python runs signal handlers on the main thread only between bytecodes, and the main thread
may be inside a build for a minute. TVM releases the GIL while it compiles, so the thread
acts within milliseconds.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from foundation.job_driver.cancellation import Cancellation
from foundation.processes.native_stderr import terminal_stderr

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# How long a second signal waits for the job's last words to be written before exiting.
LAST_WORDS_S = 2.0


@contextmanager
def cancel_on_signals(notify: Callable[[str], None] | None = None, signals: tuple[int, ...] = SIGNALS,
                      exiting: bool = True) -> Iterator[Cancellation]:
    """A Cancellation that SIGINT and SIGTERM (or ``signals``) request, for the duration of the block.
    ``exiting``: the process exits once a signal ended the block, so the handlers stay (below);
    a Python caller, which goes on, gets its own back however the block ended."""
    cancellation = Cancellation()
    # Opened now, on the terminal: while tuning, fd 2 (sys.stderr) points at the job's log.
    terminal = terminal_stderr()
    reader, writer = socket.socketpair()
    writer.setblocking(False)

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        if not cancellation.is_set():
            cancellation.request_by_signal(signum)
            if notify is not None:
                notify(f"{name}: stopping after the batch in flight, keeping its records ({name} again stops at once)")
            return
        terminal.write(f"error: {name} again: stopped at once (the records measured so far are kept)\n")
        terminal.flush()
        cancellation.abandon(LAST_WORDS_S)
        os._exit(128 + (cancellation.signum or signum))

    def watch() -> None:
        while True:
            try:
                received = reader.recv(64)
            except OSError:
                return
            if not received:
                return
            for signum in received:
                if signum in signals:
                    on_signal(signum)

    # The Python-level handlers do nothing: their C side writes the signal to the wakeup fd.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in signals}
    previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    watcher = threading.Thread(target=watch, name="farm-signals", daemon=True)
    watcher.start()
    try:
        yield cancellation
    finally:
        # Interrupted, the command is on its way out: the handlers stay, so a second signal
        # while it reports and exits still means "stop at once", never Python's default.
        if cancellation.signum is None or not exiting:
            _restore(previous, previous_fd, reader, writer, watcher)
            terminal.close()


def _restore(previous: dict, previous_fd: int, reader: socket.socket, writer: socket.socket,
             watcher: threading.Thread) -> None:
    signal.set_wakeup_fd(previous_fd)
    for sig, handler in previous.items():
        signal.signal(sig, handler)
    writer.close()
    reader.shutdown(socket.SHUT_RDWR)
    reader.close()
    watcher.join(timeout=1.0)
