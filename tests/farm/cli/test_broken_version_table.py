"""A farm registry whose version table was edited by hand (a botched manual migration): every
command says what the table holds and how to fix it, in one line, exit 4; never exit 70, never
"not a farm registry", and `farm registry upgrade` never leaves a row it cannot read again."""

from __future__ import annotations

import sqlite3

import pytest

from support.farm_inprocess import run_farm_inprocess
from support.farm_process import one_error_line

COMMANDS = [["registry", "upgrade"], ["jobs"], ["registry", "ls"], ["submit", "mlp-tiny", "llvm", "1"]]


@pytest.fixture
def registry(tmp_path):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    assert run_farm_inprocess("registry", "init", "--registry", url, home=tmp_path / "home").returncode == 0
    return tmp_path / "registry.db"


def edited(path, *statements: str) -> str:
    """The version row the registry was made with, after ``statements`` ran on it."""
    with sqlite3.connect(path) as db:
        (head,) = db.execute("SELECT version_num FROM alembic_version").fetchone()
        for statement in statements:
            db.execute(statement)
    db.close()
    return head


def refused(path, command) -> str:
    proc = run_farm_inprocess(*command, "--registry", f"sqlite:///{path}", home=path.parent / "home")
    line = one_error_line(proc.stderr)
    assert proc.returncode == 4, proc.stderr
    assert "internal error" not in line and "not a farm registry" not in line, line
    return line


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_blank_revision_is_named_with_how_to_set_it(registry, command):
    edited(registry, "UPDATE alembic_version SET version_num = ''")
    line = refused(registry, command)
    assert "records a blank schema revision" in line and "UPDATE alembic_version SET version_num" in line, line


@pytest.mark.parametrize("emptied", ["DELETE FROM alembic_version", "DROP TABLE alembic_version"],
                         ids=["no row", "no table"])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_the_farms_tables_without_a_revision_are_no_other_applications(registry, command, emptied):
    head = edited(registry, emptied)
    line = refused(registry, command)
    assert "the farm's tables but no schema revision" in line and f"'{head}'" in line, line


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_revision_cut_short_is_not_taken_for_the_one_it_begins(registry, command):
    # Alembic resolves a prefix of a revision to the revision: upgrade would say "at head" and keep the row.
    head = edited(registry, "UPDATE alembic_version SET version_num = '0007'")
    line = refused(registry, command)
    assert "revision 0007, newer than this farm knows" in line and "row was edited" in line and head in line, line
    with sqlite3.connect(registry) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [("0007",)]
    db.close()


def test_an_upgrade_from_a_revision_older_than_the_tables_fails_whole_and_says_why(registry):
    head = edited(registry, "UPDATE alembic_version SET version_num = '0005_prepack'")
    line = refused(registry, ["registry", "upgrade"])
    assert "upgrading the registry" in line and "from 0005_prepack" in line and "already exists" in line, line
    assert "cannot reach" not in line and "nothing was changed" in line, line
    with sqlite3.connect(registry) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [("0005_prepack",)]
    db.close()
    assert head != "0005_prepack"
