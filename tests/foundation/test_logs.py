"""The daemons' logging: one text layout, JSON lines with the ids of the work, libraries from WARNING up."""

from __future__ import annotations

import errno
import io
import json
import logging
import re
import threading

import pytest

import foundation.logs
from foundation.logs import LIBRARIES, LogFormat, LogLevel, LostLogs, configure_logging, log_ids, set_process_ids


@pytest.fixture
def configured():
    """configure_logging into a buffer; the root logger and the libraries' levels put back after."""
    root = logging.getLogger()
    saved = (root.level, list(root.handlers), {name: logging.getLogger(name).level for name in LIBRARIES},
             foundation.logs.configured())
    stream = io.StringIO()

    def configure(log_format: str, level: str = "info") -> io.StringIO:
        configure_logging(log_format, level, stream)
        return stream

    try:
        yield configure
    finally:
        set_process_ids(agent_id=None)
        root.handlers[:] = saved[1]
        root.setLevel(saved[0])
        for name, level in saved[2].items():
            logging.getLogger(name).setLevel(level)
        foundation.logs._configured = saved[3]


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_text_layout(configured):
    stream = configured("text")
    logging.getLogger("farm.coordinator").info("job %s: %d tasks", "job-1", 3)
    logging.getLogger("farm.agent").warning("RPC server not serving yet")
    first, second = _lines(stream)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO farm\.coordinator: job job-1: 3 tasks", first)
    assert re.fullmatch(r"\S+ \S+ WARNING farm\.agent: RPC server not serving yet", second)


def test_json_lines_carry_time_level_logger_message_and_ids(configured):
    stream = configured("json")
    logging.getLogger("farm.coordinator").info("job %s planned", "job-1", extra={"job_id": "job-1"})
    with log_ids(job_id="job-2", shard_id="job-2/s0"):
        logging.getLogger("farm.agent").warning("tuning %s", "job-2/s0")
        with log_ids(shard_id="job-2/s1"):
            logging.getLogger("farm.agent").info("inner")
    logging.getLogger("farm.agent").info("no ids")
    documents = [json.loads(line) for line in _lines(stream)]
    assert [d["message"] for d in documents] == ["job job-1 planned", "tuning job-2/s0", "inner", "no ids"]
    first = documents[0]
    assert set(first) == {"time", "level", "logger", "message", "job_id"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", first["time"])
    assert (first["level"], first["logger"], first["job_id"]) == ("info", "farm.coordinator", "job-1")
    assert (documents[1]["level"], documents[1]["job_id"], documents[1]["shard_id"]) == ("warning", "job-2", "job-2/s0")
    assert (documents[2]["job_id"], documents[2]["shard_id"]) == ("job-2", "job-2/s1")
    assert "job_id" not in documents[3] and "shard_id" not in documents[3]


def test_an_agent_id_names_every_record_of_the_process(configured):
    stream = configured("json")
    set_process_ids(agent_id="agent-7")
    seen = threading.Thread(target=lambda: logging.getLogger("farm.agent").info("from a worker thread"))
    seen.start()
    seen.join()
    with log_ids(shard_id="job-1/s0"):
        logging.getLogger("farm.agent").info("tuning")
    documents = [json.loads(line) for line in _lines(stream)]
    assert [d["agent_id"] for d in documents] == ["agent-7", "agent-7"]
    assert documents[1]["shard_id"] == "job-1/s0"


def test_exceptions_stay_in_one_json_line(configured):
    stream = configured("json")
    try:
        raise ValueError("bad shard")
    except ValueError:
        logging.getLogger("farm.coordinator").exception("planning %s failed", "job-1")
    (line,) = _lines(stream)
    document = json.loads(line)
    assert document["level"] == "error"
    assert "ValueError: bad shard" in document["exception"]


def test_libraries_write_from_warning_up(configured):
    stream = configured("text", "debug")
    logging.getLogger("alembic.runtime.plugins").info("setup plugin alembic.autogenerate.schemas")
    logging.getLogger("alembic.runtime.migration").info("Context impl SQLiteImpl.")
    logging.getLogger("farm.agent").debug("the farm's own debug record")
    logging.getLogger("alembic.runtime.migration").warning("a library's warning")
    assert [line.split(" ", 3)[3] for line in _lines(stream)] == [
        "farm.agent: the farm's own debug record", "alembic.runtime.migration: a library's warning"]


def test_the_level_drops_less_severe_records(configured):
    stream = configured("json", "warning")
    logging.getLogger("farm.agent").info("dropped")
    logging.getLogger("farm.agent").warning("kept")
    assert [json.loads(line)["message"] for line in _lines(stream)] == ["kept"]


def test_configuring_again_replaces_only_its_own_handler(configured):
    other = logging.StreamHandler(io.StringIO())
    logging.getLogger().addHandler(other)
    first = configured("text")
    configured("json")
    handlers = logging.getLogger().handlers
    assert other in handlers
    assert sum(getattr(h, "farm_handler", False) for h in handlers) == 1
    logging.getLogger("farm.agent").warning("once")
    assert len(_lines(first)) == 1  # one handler wrote it, as JSON
    json.loads(_lines(first)[0])


def test_the_settings_installed_are_remembered_for_child_processes(configured):
    configured("JSON", "Warning")
    assert foundation.logs.configured() == (LogFormat.JSON, LogLevel.WARNING)
    configured("text", "debug")
    assert foundation.logs.configured() == (LogFormat.TEXT, LogLevel.DEBUG)


def test_unknown_ids_and_choices_are_refused():
    with pytest.raises(ValueError, match="log ids are"), log_ids(task_id="x"):
        pass
    with pytest.raises(ValueError):
        configure_logging("xml", "info", io.StringIO())


def test_a_job_step_names_its_job_on_every_record(configured):
    from foundation.logs import logs_job

    class Steps:
        @logs_job
        def build(self, job_id: str, note: str = "") -> str:
            logging.getLogger("farm.coordinator").info("building%s", note)
            return job_id

    stream = configured("json")
    assert Steps().build("job-3", note=" now") == "job-3"
    logging.getLogger("farm.coordinator").info("after")
    first, after = (json.loads(line) for line in _lines(stream))
    assert (first["message"], first["job_id"]) == ("building now", "job-3")
    assert "job_id" not in after


class _FullDisk(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_log_files_on_a_full_disk_are_said_lost_once_and_other_failures_as_before(monkeypatch):
    terminal = io.StringIO()
    full, broken = logging.StreamHandler(_FullDisk()), logging.StreamHandler(io.StringIO())
    broken.setFormatter(logging.Formatter("%(bad_field)s"))  # a KeyError, no disk's fault
    reported = []
    monkeypatch.setattr(logging.Handler, "handleError", lambda self, record: reported.append(record.getMessage()))
    LostLogs("/home/farm/jobs/job-1", terminal).watch([full, broken])
    logger = logging.getLogger("farm-test-lost-logs")
    logger.propagate = False
    logger.addHandler(full)
    logger.addHandler(broken)
    try:
        for n in range(3):
            logger.warning("record %d", n)
    finally:
        logger.removeHandler(full)
        logger.removeHandler(broken)
    assert terminal.getvalue().splitlines() == [
        "warning: the job's logs in /home/farm/jobs/job-1 are not kept: No space left on device there "
        "(free some space, or set FARM_HOME to a directory on another disk); the job goes on"]
    assert reported == ["record 0", "record 1", "record 2"]
