"""TVM's popen workers forked from one process that has imported TVM, instead of each importing it.

TVM starts every builder and runner worker as `python -m tvm.exec.popen_worker`, and each pays
`import tvm` and the target's intrinsics (1.4-2 CPU-seconds on the 2-core boxes: a third of a small
tuning run's CPU, and again each time a worker is recycled or killed on a timeout). Here one
*zygote* per target kind imports all of that once; every worker after it is a fork of the zygote
that runs TVM's own worker loop on the pipes its pool made. Nothing else changes: the pool, its
protocol, its timeouts and its recycling are TVM's.

The zygote is single-threaded when it forks (it never runs TVM code, and OpenBLAS is held to one
thread in it), ignores Ctrl-C like the workers, and ends when the process that started it does
(its socket reads end-of-file); each worker dies with the zygote (PR_SET_PDEATHSIG). A worker is
not this process's child, so it is watched through a pidfd (Linux 5.3+); where there is none,
FORK_WORKERS_ENV is "0", or the zygote cannot start, workers start as TVM starts them.

A process that has imported TVM itself can give its zygote that import (`fork_zygote_here`): the
zygote is then a fork of the process, not a new Python (about a CPU-second less on the 2-core
boxes, each `farm submit` that tunes and each agent). Only where the caller knows every thread of
its process and none can be inside TVM, LLVM or gRPC (the child keeps only the forking thread, and
a lock another thread held stays held in it), and only while every thread of the process is a
Python thread: TVM's thread pool, gRPC's, OpenMP's and OpenBLAS's are not, and whichever of them
runs, the zygote starts as a new Python. CPU targets only: a CUDA context does not survive a fork.

A zygote forks commands too (`Zygote.start_group`, a ProcessGroup's launcher): `python -m` modules
that would import TVM again, such as an agent's RPC server, run in a fork of it under a guard that
leads their process group (foundation.processes.group_guard). In `ps` they show the command line of
the process the zygote was forked from.
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading

from foundation.config import fork_workers, fork_zygote
from foundation.processes.forked_process import ForkedChild, ForkedGroupLeader, ForkedProcess
from foundation.processes.heap import freeze_at_exit, freeze_long_lived, tune_collector
from foundation.processes.native_stderr import worker_stderr
from foundation.processes.process_group import Launcher

ZYGOTE_MODULE = __name__  # what the zygote runs (`python -m`)

log = logging.getLogger(__name__)

# Target kinds whose zygote may be a fork of the process: nothing of theirs lives in a device driver.
FORKABLE_FROM_HERE = frozenset({"llvm"})

_PID = struct.Struct("<q")
_MAX_REQUEST = 1 << 20  # the environment and working directory a worker starts with


def forking_available() -> bool:
    """Whether workers are forked here: Linux with pidfds, and not switched off."""
    if not fork_workers():
        return False
    return sys.platform.startswith("linux") and hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")


def worker_pool(target_kind: str, zygote: "Zygote | None" = None, **pool_options):
    """A TVM PopenPoolExecutor whose workers are forked from ``zygote`` (by default this process's for
    ``target_kind``), or TVM's own where forking is not available."""
    from tvm.support.popen_pool import PopenPoolExecutor

    if not forking_available():
        return PopenPoolExecutor(**pool_options)
    return _forking_pool_class()(zygote or zygote_for(target_kind), **pool_options)


def runner_on_forked_workers(runner_class, target_kind: str, **options):
    """TVM's LocalRunner or RPCRunner (``runner_class``), its pool's workers forked.

    The runner is TVM's own class, undecorated (``_cls``: MetaSchedule takes it through the
    farm's PyRunner wrapper, measure.observed_runner). Its constructor makes a pool and checks it
    by starting a worker and waiting for it (1.5 s a tuning run); here that pool is replaced
    before any worker starts, and the caller starts the new pool's worker in the background."""
    if not forking_available():
        return runner_class(**options)

    class OnForkedWorkers(runner_class._cls):
        def _sanity_check(self) -> None:  # the constructor's last step, right after it made self.pool
            self.pool = _forking_pool_like(self.pool, target_kind)

    return OnForkedWorkers(**options)


def _forking_pool_like(pool, target_kind: str):
    """A forking pool with ``pool``'s options (TVM's PopenPoolExecutor, no worker started yet)."""
    forking = _forking_pool_class()(
        zygote_for(target_kind), max_workers=pool._threadpool._max_workers, timeout=pool._timeout,
        initializer=pool._initializer, initargs=pool._initargs, maximum_process_uses=pool._maximum_process_uses,
        stdout=pool._stdout, stderr=pool._stderr)
    pool.shutdown()
    return forking


_zygotes: dict[str, "Zygote"] = {}
_zygotes_lock = threading.Lock()


def zygote_for(target_kind: str) -> "Zygote":
    """This process's zygote for ``target_kind`` (the lean intrinsics differ by kind); started on
    first use, and again if it has died."""
    with _zygotes_lock:
        if not _zygotes:
            atexit.register(close_zygotes)
        if target_kind not in _zygotes:
            _zygotes[target_kind] = Zygote(target_kind)
        return _zygotes[target_kind]


def fork_zygote_here(target_kind: str) -> bool:
    """Start this process's zygote for ``target_kind`` now, as a fork of this process (TVM and the
    target's intrinsics imported here first); whether it did. The caller vouches that no thread of
    this process but the calling one can be inside TVM, LLVM or gRPC; a thread that is not Python's
    (TVM's pool, gRPC's, OpenMP's, OpenBLAS's), a zygote already started, a kind outside
    FORKABLE_FROM_HERE or either switched off (FORK_WORKERS_ENV, FORK_ZYGOTE_ENV) leave the zygote to start
    as a new Python on first use."""
    if target_kind not in FORKABLE_FROM_HERE or not forking_available() or not fork_zygote():
        return False
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics(target_kind)  # imports TVM: what the zygote is spared
    return zygote_for(target_kind).fork_here()


def launcher_forked_here(target_kind: str) -> "Launcher | None":
    """This process's zygote for ``target_kind`` as a ProcessGroup launcher (Zygote.start_group),
    where fork_zygote_here made it; None where it did not."""
    with _zygotes_lock:
        zygote = _zygotes.get(target_kind)
    if zygote is None or not isinstance(zygote.process, ForkedChild):
        return None
    return zygote.start_group


def only_python_threads() -> bool:
    """Whether every thread of this process is one Python's threading knows (none started by a
    native library: TVM's thread pool, gRPC, OpenMP, OpenBLAS)."""
    # A native thread that has called into Python is listed too, as a _DummyThread: not one of Python's.
    known = {t.native_id for t in threading.enumerate() if not isinstance(t, threading._DummyThread)}
    try:
        return all(int(tid) in known for tid in os.listdir("/proc/self/task"))
    except OSError:
        return False


def close_zygotes() -> None:
    """Stop this process's zygotes (and any worker still running), and reap them."""
    with _zygotes_lock:
        for zygote in _zygotes.values():
            zygote.close()


class Zygote:
    """The parent's handle on one zygote process: asks it for workers, one at a time."""

    def __init__(self, target_kind: str):
        self.target_kind = target_kind
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.process: "subprocess.Popen | ForkedChild | None" = None
        self.failed = False  # it could not start a worker twice in a row: not asked again

    def spawn(self, worker_read: int, worker_write: int, stdout: int = 1, stderr: int = 2) -> ForkedProcess:
        """A new worker reading its tasks from ``worker_read`` and answering on ``worker_write``,
        writing to ``stdout`` and ``stderr``, with this process's environment and working directory
        as they are now."""
        request = pickle.dumps(("worker", dict(os.environ), os.getcwd(), None))
        return ForkedProcess(self._fork(request, [worker_read, worker_write, stdout, stderr], "a worker"))

    def start_group(self, argv: list[str], output: int, env: dict[str, str]) -> ForkedGroupLeader:
        """``argv`` (``python -m module ...``, as ProcessGroup runs it) in a fork of the zygote, under a
        guard that leads a process group of its own and takes it down when the zygote ends
        (group_guard.lead_forked_group); both write to ``output``. A ProcessGroup's launcher: the
        command is spared the import of TVM the zygote has made (TVM's RPC server, say)."""
        if len(argv) < 3 or argv[1] != "-m":
            raise ValueError(f"a zygote runs `python -m` commands, not {argv!r}")
        if self.failed:
            raise ChildProcessError(f"the {self.target_kind} worker zygote could not start")
        status_read, status_write = os.pipe()
        request = pickle.dumps(("group", env, os.getcwd(), argv[2:]))
        try:
            pid = self._fork(request, [output, status_write], f"`{' '.join(argv[1:3])}`")
        except BaseException:
            os.close(status_read)
            raise
        finally:
            os.close(status_write)
        return ForkedGroupLeader(pid, status_read)

    def _fork(self, request: bytes, fds: list[int], what: str) -> int:
        """The pid of the process the zygote forked for ``request``, handed ``fds``."""
        with self._lock:
            for _attempt in (1, 2):  # a zygote that died (killed, out of memory) is started again once
                if self._sock is None:
                    self._start()
                try:
                    socket.send_fds(self._sock, [request], fds)
                    reply = self._sock.recv(_PID.size)
                except OSError:
                    reply = b""
                if len(reply) == _PID.size:
                    pid = _PID.unpack(reply)[0]
                    if pid < 0:  # the zygote's fork failed: as os.fork() here would have
                        raise OSError(-pid, os.strerror(-pid))
                    return pid
                self._stop()
            # Twice in a row: it cannot start here (the farm not importable by sys.executable, say).
            self.failed = True
            log.warning("the %s worker zygote did not start %s twice: this process's workers and commands start "
                        "as new processes, each importing TVM", self.target_kind, what)
            raise ChildProcessError(f"the {self.target_kind} worker zygote did not start {what}")

    def close(self) -> None:
        with self._lock:
            self._stop()

    def fork_here(self) -> bool:
        """Start the zygote as a fork of this process, unless it is running or a thread not
        Python's is (see fork_zygote_here); whether it did."""
        with self._lock:
            if self._sock is not None or self.failed or not only_python_threads():
                return False
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            for stream in (sys.stdout, sys.stderr):  # or the child holds a copy of what is buffered
                try:
                    stream.flush()
                except (AttributeError, OSError, ValueError):
                    pass
            # Forked with Ctrl-C and SIGTERM blocked, as _start's zygote starts (the mask is inherited).
            masked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            try:
                pid = os.fork()
                if pid == 0:
                    _serve_forked(self.target_kind, theirs, mine)  # never returns
            except OSError:  # no memory or processes left for a fork: started as a new Python on first use
                mine.close()
                return False
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, masked)
                theirs.close()
            self.process = ForkedChild(pid)
            self._sock = mine
            return True

    def _start(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")  # threads would not survive its forks
        # Started with Ctrl-C and SIGTERM blocked, as the workers were (WorkerPools.get): a signal to
        # the terminal's process group is for the farm process, which then stops the workers.
        masked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", ZYGOTE_MODULE, self.target_kind, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), env=env)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, masked)
            theirs.close()
        self._sock = mine

    def _stop(self) -> None:
        if self._sock is not None:
            self._sock.close()  # the zygote reads end-of-file and exits; its workers die with it
            self._sock = None
        if self.process is not None:
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None


_forking_pool: type | None = None


def _forking_pool_class() -> type:
    """TVM's PopenPoolExecutor, its workers made by a zygote (classes made on first use: defining
    them imports TVM)."""
    global _forking_pool
    if _forking_pool is not None:
        return _forking_pool
    from tvm.support.popen_pool import PopenPoolExecutor, PopenWorker

    class ForkedPopenWorker(PopenWorker):
        def __init__(self, zygote: Zygote, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._zygote = zygote

        def _start(self) -> None:
            if self._proc is not None:
                return
            if self._zygote.failed:
                super()._start()
                return
            main_read, worker_write = os.pipe()
            worker_read, main_write = os.pipe()
            devnull = os.open(os.devnull, os.O_WRONLY)
            # A background job's log, when this process's fd 2 stays the caller's (native_stderr).
            job_log = worker_stderr()
            try:
                stdout = _stream_fd(self._stdout, 1, devnull)
                stderr = stdout if self._stderr == subprocess.STDOUT else _stream_fd(
                    self._stderr, 2 if job_log is None else job_log, devnull)
                self._proc = self._zygote.spawn(worker_read, worker_write, stdout, stderr)
            except ChildProcessError:  # no zygote here: this process's workers start as TVM starts them
                os.close(main_read)
                os.close(main_write)
                super()._start()
                return
            finally:
                for fd in (worker_read, worker_write, devnull):
                    os.close(fd)
                if job_log is not None:
                    os.close(job_log)
            self._reader = os.fdopen(main_read, "rb")
            self._writer = os.fdopen(main_write, "wb")

    class ForkingPopenPool(PopenPoolExecutor):
        def __init__(self, zygote: Zygote, **options):
            super().__init__(**options)
            self._zygote = zygote

        def _worker_run(self, fn, args, kwargs):
            # TVM's pool makes a PopenWorker for each of its threads on first use; one made here first
            # is the one it uses.
            tid = threading.get_ident()
            with self._lock:
                if tid not in self._worker_map:
                    self._worker_map[tid] = ForkedPopenWorker(
                        self._zygote, self._initializer, self._initargs, self._maximum_process_uses,
                        self._stdout, self._stderr)
            return super()._worker_run(fn, args, kwargs)

    _forking_pool = ForkingPopenPool
    return _forking_pool


def _stream_fd(spec, default: int, devnull: int) -> int:
    """The descriptor a worker writes a stream to, from what subprocess.Popen would take."""
    if spec is None:
        return default
    if spec == subprocess.DEVNULL:
        return devnull
    return spec if isinstance(spec, int) else spec.fileno()


def _serve(target_kind: str, sock: socket.socket) -> None:
    """The zygote: import once, then fork a worker (or a group's guard) for each request until the
    parent goes."""
    # Children are reaped as they end, here, so that their CPU time adds to the zygote's and, once the
    # farm process reaps the zygote, to the farm process's (what `time` and the suite's accounting see).
    workers: set[int] = set()
    groups: set[int] = set()  # each the leader of a process group (Zygote.start_group)

    def reap(_signum=None, _frame=None) -> None:
        for children in (workers, groups):
            for pid in list(children):
                try:
                    done, _status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    done = pid
                if done:
                    children.discard(pid)

    signal.signal(signal.SIGCHLD, reap)
    import cloudpickle  # noqa: F401  (what the worker loop needs, imported before the forks)
    import tvm.exec.popen_worker
    from tvm.s_tir import meta_schedule  # noqa: F401
    from tvm.s_tir.meta_schedule.builder import local_builder  # noqa: F401
    from tvm.s_tir.meta_schedule.runner import local_runner, rpc_runner  # noqa: F401

    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
    from foundation.processes.group_guard import lead_forked_group

    install_lean_tensor_intrinsics(target_kind)
    # Frozen before the first fork, a worker's collections skip the zygote's heap instead of
    # walking it (and copying every page of it: the walk writes to each object).
    freeze_long_lived()
    zygote = os.getpid()
    try:
        while True:
            try:
                request, fds, _flags, _address = socket.recv_fds(sock, _MAX_REQUEST, 4)
            except OSError:
                return
            if not request:  # the parent closed its end, or ended
                return
            kind, env, cwd, module_argv = pickle.loads(request)
            try:
                pid = os.fork()
            except OSError as err:  # the process limit (EAGAIN) or memory: the parent raises it, the zygote goes on
                for fd in fds:
                    os.close(fd)
                sock.send(_PID.pack(-(err.errno or 1)))
                continue
            if pid == 0:
                sock.close()
                if kind == "group":
                    _in_child(env, cwd, lead_forked_group, zygote, module_argv, *fds)
                _in_child(env, cwd, _become_worker, *fds, tvm.exec.popen_worker.main)
            if kind == "group":
                try:  # as the child does too: whichever runs first, the group exists when we answer
                    os.setpgid(pid, pid)
                except OSError:
                    pass
            (groups if kind == "group" else workers).add(pid)
            for fd in fds:
                os.close(fd)
            try:
                sock.send(_PID.pack(pid))
            except OSError:
                return
    finally:  # workers and groups left running when the parent went are stopped, and reaped
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for pid in groups | workers:
            try:
                (os.killpg if pid in groups else os.kill)(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def _serve_forked(target_kind: str, sock: socket.socket, parents_end: socket.socket) -> None:
    """In the child Zygote.fork_here made: let go of what is the parent's, then serve as a zygote."""
    code = 0
    try:
        parents_end.close()
        # The parent's signal handling is not the zygote's: a signal here (SIGCHLD, as each worker
        # ends) must not reach the parent's wakeup fd (farm.cli.interrupts reads it as a Ctrl-C).
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # Workers log as a new Python would (to stderr, warnings up), not into the parent's handlers.
        for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
            if isinstance(logger, logging.Logger):
                logger.handlers.clear()
        # The parent's heap, as it was, stays for good; frozen without a collection, which would
        # walk it and so copy every page of it.
        gc.freeze()
        _serve(target_kind, sock)
    except BaseException:  # never back into the parent's code
        code = 1
    finally:
        os._exit(code)


def _in_child(env: dict[str, str], cwd: str, run, *args) -> None:
    """In a child the zygote forked: the requester's environment and working directory, then
    ``run(*args)``, which ends the process; never returns into the zygote's loop."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        run(*args)
    finally:
        os._exit(1)


def _become_worker(worker_read: int, worker_write: int, stdout: int, stderr: int, worker_loop) -> None:
    """In a forked child: the parent's streams, then TVM's worker loop."""
    code = 0
    try:
        # Its initializer (LeanWorkerInit) ties it to the zygote's life, which ends with the farm process's.
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        os.close(stdout)
        os.close(stderr)
        sys.argv = ["tvm.exec.popen_worker", str(worker_read), str(worker_write)]
        worker_loop()
    except BaseException:  # a worker never returns into the zygote's loop
        code = 1
    finally:
        os._exit(code)


def main(argv: list[str]) -> None:
    target_kind, fd = argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tune_collector()  # before its imports (foundation.processes.heap)
    freeze_at_exit()
    _serve(target_kind, socket.socket(fileno=int(fd)))


if __name__ == "__main__":
    main(sys.argv[1:])
