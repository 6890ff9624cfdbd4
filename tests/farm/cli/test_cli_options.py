"""Every option of every command has an environment variable named in --help; -h, usage lines and completion."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from farm.cli.app import app
from farm.cli.options import DEPRECATED_ENVVARS, envvar_name, read_deprecated_envvars

from support.farm_inprocess import run_farm_inprocess

# Flags that print something and exit before any command runs (--help and --version eagerly,
# the completion flags from their callbacks): asked for on a terminal, never configured.
PRINT_AND_EXIT = {
    "--help": "prints help and exits",
    "--version": "prints versions and exits",
    "--install-completion": "writes the shell's completion script and exits",
    "--show-completion": "prints the shell's completion script and exits",
}
# Options several commands share: one variable whatever the command.
SHARED = {
    "--json": "FARM_JSON",
    "--registry": "FARM_REGISTRY",
    "--coordinator": "FARM_COORDINATOR",
    "--token-file": "FARM_TOKEN_FILE",
    "--tls-ca": "FARM_TLS_CA",
    "--tls-cert": "FARM_TLS_CERT",
    "--tls-key": "FARM_TLS_KEY",
    "--metrics-listen": "FARM_METRICS_LISTEN",
    "--log-format": "FARM_LOG_FORMAT",
    "--log-level": "FARM_LOG_LEVEL",
}


def _commands(command=None, path=()):
    """(path, click command) of every command under `farm`, groups included."""
    command = command or get_command(app)
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def _options():
    for path, command in _commands():
        for param in command.params:
            if param.param_type_name == "option":
                yield path, param


def test_every_option_has_an_environment_variable_shown_in_help():
    missing, hidden, checked = [], [], 0
    for path, option in _options():
        flag = max(option.opts, key=len)
        if flag in PRINT_AND_EXIT:
            continue
        checked += 1
        where = f"farm {' '.join(path)} {flag}"
        if not option.envvar:
            missing.append(where)
        elif not option.show_envvar:
            hidden.append(where)
    assert checked > 60, f"walked only {checked} options: the walk missed commands"
    assert not missing, f"options without an environment variable: {missing}"
    assert not hidden, f"options whose --help does not name their variable: {hidden}"


def test_variables_follow_the_naming_rule():
    """FARM_<COMMAND>_<FLAG> or the shared names: no other."""
    wrong = []
    for path, option in _options():
        flag = max(option.opts, key=len)
        if flag in PRINT_AND_EXIT or not path:
            continue
        command = path[0]  # `farm registry import`: the group's name
        expected = SHARED.get(flag) or envvar_name(command, flag)
        if command == "coordinator" and flag in ("--token-file", "--tls-cert", "--tls-key"):
            expected = SHARED[flag]  # the server's own files, under the same names as a caller's
        if option.envvar != expected:
            wrong.append(f"farm {' '.join(path)} {flag}: {option.envvar}, not {expected}")
    assert not wrong, wrong


@pytest.mark.parametrize(("command", "flag", "variable"), [
    ("coordinator", "--heartbeat-interval", "FARM_COORDINATOR_HEARTBEAT_INTERVAL"),
    ("coordinator", "--lease-ttl", "FARM_COORDINATOR_LEASE_TTL"),
    ("coordinator", "--max-attempts", "FARM_COORDINATOR_MAX_ATTEMPTS"),
    ("coordinator", "--records-per-report", "FARM_COORDINATOR_RECORDS_PER_REPORT"),
    ("coordinator", "--report-rate", "FARM_COORDINATOR_REPORT_RATE"),
    ("coordinator", "--report-within", "FARM_COORDINATOR_REPORT_WITHIN"),
    ("coordinator", "--report-jitter", "FARM_COORDINATOR_REPORT_JITTER"),
    ("coordinator", "--grace", "FARM_COORDINATOR_GRACE"),
    ("agent", "--target", "FARM_AGENT_TARGET"),
    ("agent", "--grace", "FARM_AGENT_GRACE"),
])
def test_the_settings_the_issue_named_are_in_help(command, flag, variable):
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert variable in " ".join(result.output.split()), result.output
    option = next(p for path, p in _options() if path == (command,) and flag in p.opts)
    assert option.envvar == variable


def test_each_old_name_stands_for_an_option_named_by_the_rule():
    options = {(path[0], max(option.opts, key=len)): option.envvar for path, option in _options() if path}
    for (command, flag), old in DEPRECATED_ENVVARS.items():
        assert options[(command, flag)] == envvar_name(command, flag) != old
        environ, warned = {old: "x"}, []
        read_deprecated_envvars(environ, warned.append)
        assert environ == {envvar_name(command, flag): "x"}
        assert warned == [f"warning: {old} is deprecated: set {envvar_name(command, flag)} instead "
                          f"(`farm {command} {flag}`)"]


# An old name and its new one, a command that reads it, a value it refuses, and what the refusal says:
# the refusal shows the value reached the option.
RENAMED = [
    ("FARM_WEIGHTS_LAYOUT", "FARM_SUBMIT_WEIGHTS_LAYOUT", ["submit", "mlp-tiny", "llvm", "1"], "bogus",
     "error: unknown weights layout 'bogus'"),
    ("FARM_BUILD_WORKERS", "FARM_AGENT_BUILD_WORKERS", ["agent", "--coordinator", "127.0.0.1:1"], "0",
     "error: invalid value for '--build-workers'"),
]


@pytest.mark.parametrize(("old", "new", "args", "value", "refusal"), RENAMED)
def test_an_old_name_still_sets_its_option_with_one_warning(tmp_path, old, new, args, value, refusal):
    result = run_farm_inprocess(*args, home=tmp_path, env={old: value, new: None})
    assert result.returncode == 2
    warning, error = result.stderr.splitlines()
    assert warning.startswith(f"warning: {old} is deprecated: set {new} instead")
    assert error.startswith(refusal)


@pytest.mark.parametrize(("old", "new", "args", "value", "refusal"), RENAMED)
def test_the_new_name_sets_it_and_wins_over_the_old(tmp_path, old, new, args, value, refusal):
    alone = run_farm_inprocess(*args, home=tmp_path, env={old: None, new: value})
    assert alone.returncode == 2
    assert alone.stderr.startswith(refusal) and alone.stderr.count("\n") == 1
    both = run_farm_inprocess(*args, home=tmp_path, env={old: "2", new: value})
    assert both.returncode == 2
    warning, error = both.stderr.splitlines()
    assert warning == f"warning: {old} is deprecated and ignored, {new} is set (unset {old})"
    assert error.startswith(refusal)


def test_a_variable_sets_its_option():
    """The coordinator's TTL check sees the TTL and the interval given in the environment."""
    result = CliRunner().invoke(app, ["coordinator"], env={"FARM_COORDINATOR_LEASE_TTL": "1",
                                                           "FARM_COORDINATOR_HEARTBEAT_INTERVAL": "5"})
    assert result.exit_code != 0
    assert "--lease-ttl 1 must exceed --heartbeat-interval 5" in str(result.exception)


def test_farm_json_asks_for_json():
    result = CliRunner().invoke(app, ["models"], env={"FARM_JSON": "1"})
    assert result.exit_code == 0, result.output
    assert {"resnet-18", "mlp-tiny"} <= {m["name"] for m in json.loads(result.output)}


def test_the_agent_takes_its_targets_from_one_variable(monkeypatch):
    agent = get_command(app).commands["agent"]
    assert agent.make_context("agent", ["--coordinator", "c:1"]).params["target"] == ["llvm"]
    monkeypatch.setenv("FARM_AGENT_TARGET", "llvm cuda")
    assert list(agent.make_context("agent", ["--coordinator", "c:1"]).params["target"]) == ["llvm", "cuda"]


@pytest.mark.parametrize("args", [["-h"], ["submit", "-h"], ["registry", "-h"], ["registry", "import", "-h"],
                                  ["agent", "-h"], ["coordinator", "-h"]])
def test_dash_h_is_help(args):
    short = CliRunner().invoke(app, args)
    long = CliRunner().invoke(app, [*args[:-1], "--help"])
    assert short.exit_code == 0, short.output
    assert short.output == long.output
    assert short.output.startswith("Usage: ")


def test_dash_capital_v_is_version():
    short = CliRunner().invoke(app, ["-V"])
    long = CliRunner().invoke(app, ["--version"])
    assert short.exit_code == 0, short.output
    assert short.output == long.output
    assert short.output.startswith("farm ")


def test_help_ends_with_every_exit_code():
    from foundation import errors

    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0, result.output
    listed = result.output.split("Exit codes:", 1)[1]
    rows = {line.split()[0] for line in listed.splitlines() if line.strip()}
    codes = {str(value) for name, value in vars(errors).items() if name.startswith("EXIT_")}
    assert codes <= {code for row in rows for code in row.split("/")}, listed
    assert {"0", "130/143"} <= rows


@pytest.mark.parametrize(("args", "usage"), [
    (["submit"], "farm submit [OPTIONS] MODEL TARGET [BATCH]"),
    (["run"], "farm run [OPTIONS] MODEL [TARGET] [BATCH]"),  # no TARGET for a library `farm export` wrote
    (["export"], "farm export [OPTIONS] MODEL TARGET BATCH OUT.so"),
    (["status"], "farm status [OPTIONS] JOB"),
    (["cancel"], "farm cancel [OPTIONS] JOB"),
    (["report"], "farm report [OPTIONS] JOB"),
    (["registry", "show"], "farm registry show [OPTIONS] [ID]"),
    (["registry", "import"], "farm registry import [OPTIONS] DIR"),
    (["registry", "export"], "farm registry export [OPTIONS] DIR"),
])
def test_usage_lines_name_arguments_in_capitals(args, usage):
    result = CliRunner().invoke(app, [*args, "--help"], prog_name="farm")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == f"Usage: {usage}"
    assert not re.search(r"\{[a-z]", result.output), result.output


def test_no_usage_line_wraps_an_argument_in_braces():
    """Every command's module declares its commands on farm.cli.command.FarmTyper."""
    for path, _ in _commands():
        if not path:
            continue
        result = CliRunner().invoke(app, [*path, "--help"], prog_name="farm")
        assert result.exit_code == 0, (path, result.output)
        usage = result.output.splitlines()[0]
        assert "{" not in usage and "}" not in usage, usage


def test_shell_completion_is_offered(monkeypatch):
    # typer's own switch for tests: the shell is named, not detected from the parent process.
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    result = CliRunner().invoke(app, ["--show-completion", "bash"], prog_name="farm")
    assert result.exit_code == 0, result.output
    assert "_FARM_COMPLETE=complete_bash" in result.output
    assert "complete -o default -F _farm_completion farm" in result.output


@pytest.mark.parametrize(("words", "expected"), [
    ("farm sub", ["submit"]),
    ("farm registry up", ["upgrade"]),
    ("farm submit mlp-tiny llvm 1 --reuse ", ["auto", "full", "topup", "off"]),
    ("farm agent --log-format ", ["text", "json"]),
])
def test_the_installed_script_completes_commands_options_and_choices(farm_exe, tmp_path, words, expected):
    """What the script `farm --install-completion` installs asks of the real `farm` on every Tab."""
    env = {**os.environ, "_FARM_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split(" ")) - 1), "FARM_HOME": str(tmp_path)}
    done = subprocess.run([farm_exe], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == expected


def test_the_coordinator_options_are_declared_once_and_the_same_everywhere():
    """Each command that may call a coordinator takes the same five options, with the same help."""
    flags = ("--coordinator", "--token-file", "--tls-ca", "--tls-cert", "--tls-key")
    seen: dict[str, dict[str, tuple]] = {}
    for path, option in _options():
        flag = max(option.opts, key=len)
        if flag in flags and path != ("coordinator",):
            seen.setdefault(" ".join(path), {})[flag] = (option.envvar, option.help.split(";")[0])
    assert set(seen) == {"submit", "status", "cancel", "jobs", "agents", "agent", "wait"}
    for command, options in seen.items():
        assert list(options) == list(flags), (command, options)
        assert options["--token-file"] == seen["submit"]["--token-file"]
        assert options["--tls-ca"] == seen["submit"]["--tls-ca"]


def test_submit_help_lists_the_options_of_each_way_of_running_apart():
    """22 options in one list mixed those that only apply embedded with those that only apply through a coordinator."""
    result = CliRunner().invoke(app, ["submit", "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    heading = None
    under: dict[str, str] = {}
    for line in result.output.splitlines():
        if line and not line.startswith(" "):
            heading = line.rstrip(":")
        elif line.lstrip().startswith("--"):
            under[line.split()[0]] = heading
    assert under["--trials"] == under["--reuse"] == under["--registry"] == "Options"
    assert under["--build-workers"] == under["--dry-run"] == "Embedded only (without --coordinator)"
    assert under["--coordinator"] == under["--tls-ca"] == under["--wait"] == under["--timeout"] == \
        "Through a coordinator"
    assert under["--until"] == under["--patience"] == under["--round-trials"] == "Tuning in rounds (--until)"
    # Other commands' coordinator options stay in their one list.
    jobs = CliRunner().invoke(app, ["jobs", "--help"], env={"COLUMNS": "120"}).output
    assert "Through a coordinator" not in jobs and "--coordinator" in jobs
