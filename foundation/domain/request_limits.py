"""What one request may ask for: the bounds `farm` checks on its command line and the coordinator
on every gRPC request (coordinator/request_checks.py), so that both refuse the same values in
the same words, before anything is written (docs/cli.md, "Exit codes": bad input)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from foundation.errors import BadInput

# Longest id, name or host name a request may carry (job, agent, shard and fingerprint ids, zoo
# model names, host names: DNS allows 253 characters). Errors quote such values, and gRPC's
# status message travels in metadata of at most a few KiB.
MAX_ID_LENGTH = 256
# Longest free text: a target's JSON, a cancel or failure reason (agents cut theirs at 2,000).
MAX_TEXT_LENGTH = 4096
# Longest JSON a registering agent describes its hardware with (its fingerprint is ~1 KiB).
MAX_FINGERPRINT_JSON = 64 * 1024


@dataclass(frozen=True)
class Bound:
    """An inclusive range of integers; ``zero_is_default``: 0 also passes and means "the default"
    (the wire's unset number)."""

    low: int
    high: int
    zero_is_default: bool = False

    def allows(self, value: int) -> bool:
        return (self.zero_is_default and value == 0) or self.low <= value <= self.high

    def describe(self) -> str:
        span = f"{self.low:,} to {self.high:,}"
        return f"0 (the default) or {span}" if self.zero_is_default else span


BATCH = Bound(1, 4096)
TRIALS = Bound(1, 1_000_000)  # a job's global budget; a round's trials
TRIALS_PER_TASK = Bound(1, 100_000)
# Timed runs of a library: a microsecond model at a million runs is seconds of timing.
VALIDATION_RUNS = Bound(1, 1_000_000)
WARMUP_RUNS = Bound(0, 1_000)
PATIENCE = Bound(1, 1_000)
SEED = Bound(0, 2**32 - 1)  # MetaSchedule forks it through numpy's RandomState, which takes 32 bits
BUILD_WORKERS = Bound(1, 1_024)
LIST_LIMIT = Bound(1, 10_000)
# The coordinator's own settings: attempts of a shard, and the fewest records an agent puts in
# one report (sent to agents as a uint32; ReportRecords takes at most TRIALS.high records).
MAX_ATTEMPTS = Bound(1, 100)
RECORDS_PER_REPORT = Bound(1, 10_000)
# A registry row id or event sequence on the wire (uint64): SQL's BIGINT, and SQLite's INTEGER,
# hold 63 bits; one beyond fails the query (OverflowError, PostgreSQL's "bigint out of range").
ROW_ID = Bound(0, 2**63 - 1)
# A submit's numbers, by the names farm.submit gives them (`farm submit` spells each as its option):
# both check them here, with check_numbers, before anything is written.
SUBMIT_NUMBERS = {"trials": TRIALS, "trials_per_task": TRIALS_PER_TASK, "build_workers": BUILD_WORKERS,
                  "runs": VALIDATION_RUNS, "seed": SEED, "patience": PATIENCE, "round_trials": TRIALS}


def check_number(name: str, value: int | None, bound: Bound, fix: str | None = None) -> None:
    """Refuse ``value`` (None: not given) outside ``bound``, naming ``name`` (an option or a field)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"{name} must be an integer, got {type(value).__name__}", fix or f"give {bound.describe()}")
    if not bound.allows(value):
        raise BadInput(f"{name} must be {bound.describe()}, got {shown_number(value)}",
                       fix or f"give {name} within that range")


def check_numbers(values: Mapping[str, int | None], bounds: Mapping[str, Bound],
                  spelled: Callable[[str], str] = str) -> None:
    """check_number for each of ``values`` against its bound in ``bounds``, named as ``spelled`` spells it."""
    for name, value in values.items():
        check_number(spelled(name), value, bounds[name])


def check_flag(name: str, value: bool) -> None:
    """Refuse a yes/no value that is not True or False: a string that merely looks like one ("no" is
    true), 1, None. `farm` and the wire can only send a bool; a Python caller can send anything."""
    if not isinstance(value, bool):
        raise BadInput(f"{name} must be True or False, got {shown_value(value)}", f"pass {name}=True or {name}=False")


def check_optional_text(name: str, value: str | None, limit: int, example: str) -> None:
    """check_text for a string that may be left out (None), refusing first what is no string at all."""
    if value is None:
        return
    if not isinstance(value, str):
        raise BadInput(f"{name} must be a string, got {shown_value(value)}", f"e.g. {example}")
    check_text(name, value, limit)


def check_text(name: str, value: str, limit: int, *, required: bool = False) -> None:
    """Refuse a string longer than ``limit`` characters (or empty, when ``required``), or holding a
    NUL character, which PostgreSQL's text cannot (the call failed as if the registry were down)."""
    if required and not value:
        raise BadInput(f"{name} is required", f"send a {name}")
    if len(value) > limit:
        raise BadInput(f"{name} is {len(value):,} characters long, more than the {limit:,} allowed",
                       f"send a {name} of at most {limit:,} characters")
    if "\x00" in value:
        raise BadInput(f"{name} holds a NUL character", f"send a {name} without one")


def shown_number(value: int) -> str:
    """A number as an error quotes it: in full unless it is absurdly long."""
    text = str(value)
    return text if len(text) <= 24 else f"a number of {len(text):,} digits"


def shown_value(value) -> str:
    """A value of the wrong type as an error quotes it: its type, and itself when short."""
    if value is None:
        return "None"
    text = repr(value)
    return f"{type(value).__name__} {text}" if len(text) <= 40 else type(value).__name__
