"""Where the farm keeps its data, and which registry and coordinator a command talks to."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from foundation.errors import BadInput

REGISTRY_ENV = "FARM_REGISTRY"
# A file holding the registry's URL, password included, in place of FARM_REGISTRY: deployments
# mount it from a secret, so the password is in no process's environment (docker's *_FILE rule).
REGISTRY_FILE_ENV = "FARM_REGISTRY_FILE"
# Far above any URL, far below what a wrong path (/dev/zero, a large file) would take to read.
_REGISTRY_FILE_MAX_BYTES = 64 * 1024
HOME_ENV = "FARM_HOME"
COORDINATOR_ENV = "FARM_COORDINATOR"
# 1/true/yes/on: a job stores its tuned library even when the validation timed it
# slower than the untuned build (still flagged slower_than_untuned); unset, it keeps the untuned build.
KEEP_SLOWER_ENV = "FARM_KEEP_SLOWER_TUNED"
# 0/false/no: builder and runner workers start as TVM starts them, each importing TVM, instead of
# forked from one process per target kind that imported it once (foundation.meta_schedule.forked_workers).
FORK_WORKERS_ENV = "FARM_FORK_WORKERS"
# 0/false/no: that process (the zygote) starts as a new Python importing TVM, instead of a fork of the
# `farm submit` or `farm agent` that has imported it already (forked_workers.fork_zygote_here).
FORK_ZYGOTE_ENV = "FARM_FORK_ZYGOTE"
# 0/false/no: float32 exp on CPUs compiles to libm's expf call per element, as TVM does, instead of a
# polynomial the loop vectorises (foundation.hardware.polynomial_exp).
POLYNOMIAL_EXP_ENV = "FARM_POLYNOMIAL_EXP"
# 0/false/no: float32 erf on CPUs compiles to libm's erff call per element, as TVM does, instead of a
# rational polynomial the loop vectorises (foundation.hardware.polynomial_erf).
POLYNOMIAL_ERF_ENV = "FARM_POLYNOMIAL_ERF"
# 1/true/yes: CPU candidates are timed after their weights are flushed from the caches, one call a
# repeat (foundation.meta_schedule.measure.MeasureSettings.cache_flush).
CPU_CACHE_FLUSH_ENV = "FARM_CPU_CACHE_FLUSH"
# Milliseconds a candidate's calls repeat back to back for one timing (TVM's min_repeat_ms; 40 unset):
# shorter trials cost less and time noisier (foundation.meta_schedule.measure.min_repeat_ms_setting).
MIN_REPEAT_MS_ENV = "FARM_MIN_REPEAT_MS"
# warm/flushed/weights/producer/auto: the cache state a CPU candidate is timed in, as its kernel meets it
# inside the model or not (foundation.domain.timing_context; unset: warm, or flushed with CPU_CACHE_FLUSH_ENV).
TIMING_CONTEXT_ENV = "FARM_TIMING_CONTEXT"
# 1/true/yes: a job's trials are spent in two phases, the second re-planned from what the first measured
# against each task's ceiling, and a task may take 4x the average unless --trials-per-task caps it
# (foundation.domain.trial_phases); unset, one phase as before.
PHASED_PLAN_ENV = "FARM_PHASED_PLAN"
# 0/false/no: a new registry does not load the packs tvm-farm ships (foundation.registry.shipped_packs).
SHIPPED_PACKS_ENV = "FARM_SHIPPED_PACKS"
# A directory of .farmpack files a new registry loads instead of those tvm-farm ships (a team's own).
SHIPPED_PACKS_DIR_ENV = "FARM_SHIPPED_PACKS_DIR"


def data_dir() -> Path:
    """The user's farm directory: $FARM_HOME, else $XDG_DATA_HOME/tvm-farm, else ~/.local/share."""
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "tvm-farm"


def checked_data_dir(*, create: bool) -> Path:
    """`data_dir` as a command uses it, created with ``create``: BadInput naming FARM_HOME (or the
    default it stands for) when it is not a directory, or cannot be made one, or (``create``) this
    user cannot write it."""
    from foundation.errors import BadInput, OutOfResources, path_error

    home = data_dir()
    named = f"{HOME_ENV}={home}" if os.environ.get(HOME_ENV) else f"the farm's directory {home} ({HOME_ENV} unset)"
    fix = f"set {HOME_ENV} to a directory this user can write"
    if home.exists() and not home.is_dir():
        raise BadInput(f"{named} is not a directory", fix)
    if create:
        try:
            home.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            refused = path_error(err, home, doing="create")  # its exit code: 6 for a full disk, else 2 or 3
            keep_fix = isinstance(refused, OutOfResources)
            raise type(refused)(f"{named} cannot be created: {err.strerror}",
                                refused.fix if keep_fix else fix) from None
        if not os.access(home, os.W_OK | os.X_OK):
            raise BadInput(f"{named} is not writable by this user", fix)
    return home


def default_registry_url() -> str:
    return f"sqlite:///{data_dir() / 'registry.db'}"


def registry_url(option: str | None) -> str:
    """The registry a command uses: --registry, else $FARM_REGISTRY, else the URL in the file
    $FARM_REGISTRY_FILE names, else the embedded SQLite. FARM_REGISTRY and FARM_REGISTRY_FILE
    both set is refused (BadInput): which one was meant cannot be told."""
    from_env = os.environ.get(REGISTRY_ENV) or None
    file = os.environ.get(REGISTRY_FILE_ENV, "").strip()
    if file and from_env:
        raise BadInput(f"both {REGISTRY_ENV} and {REGISTRY_FILE_ENV} are set",
                       f"unset one: {REGISTRY_FILE_ENV} names a file holding the URL, {REGISTRY_ENV} is the URL")
    if option:  # typer passes FARM_REGISTRY as the option; a --registry given beats a file in the environment
        return option
    if file:
        return read_registry_file(Path(file).expanduser())
    return default_registry_url()


def read_registry_file(path: Path) -> str:
    """The registry URL held in ``path`` (FARM_REGISTRY_FILE), surrounding whitespace stripped.
    BadInput (exit 2) when it cannot be read, is not a regular file, is not text, is empty or
    holds more than one line."""
    named = f"{REGISTRY_FILE_ENV}={path}"
    fix = "put the registry's URL in it, alone on one line, e.g. postgresql://farm:PASSWORD@db:5432/farm"
    try:
        # stat before open: opening a FIFO would wait for a writer.
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise BadInput(f"{named} is not a regular file", "give the path of an ordinary file holding the URL")
        with open(path, "rb") as file:
            data = file.read(_REGISTRY_FILE_MAX_BYTES + 1)
    except OSError as err:
        raise BadInput(f"cannot read {named}: {err.strerror or type(err).__name__}",
                       f"check the path and that this user may read it, or unset {REGISTRY_FILE_ENV}") from None
    if len(data) > _REGISTRY_FILE_MAX_BYTES:
        raise BadInput(f"{named} is larger than {_REGISTRY_FILE_MAX_BYTES >> 10} KiB, more than any URL", fix)
    try:
        url = data.decode().strip()
    except UnicodeDecodeError:
        raise BadInput(f"{named} is not text", fix) from None
    if not url:
        raise BadInput(f"{named} is empty", fix)
    if "\n" in url:
        raise BadInput(f"{named} holds more than one line", fix)
    return url


_YES = ("1", "true", "yes", "on")
_NO = ("0", "false", "no", "off")


def env_flag(name: str, default: bool) -> bool:
    """A yes/no environment variable: 1/true/yes/on or 0/false/no/off, in any case; unset or
    blank is ``default``; anything else is refused (BadInput), not taken for either."""
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if not value:
        return default
    if value in _YES or value in _NO:
        return value in _YES
    shown = raw if len(raw) <= 40 else raw[:40] + "…"
    raise BadInput(f"{name}={shown!r} is neither yes nor no",
                   f"set {name} to 1, true, yes or on, or to 0, false, no or off; unset, it is "
                   f"{'on' if default else 'off'}")


# Every yes/no switch read from the environment: the CLI checks them all before a command runs,
# so a mistyped one stops the command at once, not a worker process deep in a job.
SWITCHES = {KEEP_SLOWER_ENV: False, FORK_WORKERS_ENV: True, FORK_ZYGOTE_ENV: True, POLYNOMIAL_EXP_ENV: True,
            POLYNOMIAL_ERF_ENV: True, CPU_CACHE_FLUSH_ENV: False, SHIPPED_PACKS_ENV: True, PHASED_PLAN_ENV: False}


def check_switches() -> None:
    """BadInput naming the first yes/no switch in the environment that is neither."""
    for name, default in SWITCHES.items():
        env_flag(name, default)


def keep_slower_tuned() -> bool:
    """Whether a job stores a tuned library timed slower than the untuned build (KEEP_SLOWER_ENV)."""
    return env_flag(KEEP_SLOWER_ENV, False)


def fork_workers() -> bool:
    """Whether builder and runner workers are forked from one process that imported TVM (FORK_WORKERS_ENV)."""
    return env_flag(FORK_WORKERS_ENV, True)


def fork_zygote() -> bool:
    """Whether the workers' zygote may be a fork of the farm process that made it (FORK_ZYGOTE_ENV)."""
    return env_flag(FORK_ZYGOTE_ENV, True)


def polynomial_exp() -> bool:
    """Whether float32 exp compiles to a vectorisable polynomial on CPUs (POLYNOMIAL_EXP_ENV)."""
    return env_flag(POLYNOMIAL_EXP_ENV, True)


def polynomial_erf() -> bool:
    """Whether float32 erf compiles to a vectorisable rational polynomial on CPUs (POLYNOMIAL_ERF_ENV)."""
    return env_flag(POLYNOMIAL_ERF_ENV, True)


def cpu_cache_flush() -> bool:
    """Whether CPU candidates are timed with their weights flushed from the caches (CPU_CACHE_FLUSH_ENV)."""
    return env_flag(CPU_CACHE_FLUSH_ENV, False)


def phased_plan() -> bool:
    """Whether a job's trials are spent in two phases (PHASED_PLAN_ENV)."""
    return env_flag(PHASED_PLAN_ENV, False)


def job_work_dir(job_id: str) -> Path:
    """Scratch space of one job on this box (MetaSchedule's logs live here)."""
    return data_dir() / "jobs" / job_id


def fingerprint_cache_dir() -> Path:
    return data_dir() / "cache"


def shipped_packs_wanted() -> bool:
    """Whether a new registry loads the packs tvm-farm ships (SHIPPED_PACKS_ENV)."""
    return env_flag(SHIPPED_PACKS_ENV, True)


def shipped_packs_dir() -> Path | None:
    """The directory of packs a new registry loads, where SHIPPED_PACKS_DIR_ENV names one."""
    value = os.environ.get(SHIPPED_PACKS_DIR_ENV, "").strip()
    return Path(value).expanduser() if value else None
