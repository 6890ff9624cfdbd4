"""FARM_REGISTRY_FILE: the registry's URL read from a file (a mounted secret), in place of
FARM_REGISTRY; a file that cannot serve is refused naming it, exit 2."""

from __future__ import annotations

import os

import pytest

from foundation.config import REGISTRY_ENV, REGISTRY_FILE_ENV, default_registry_url, registry_url
from foundation.errors import EXIT_BAD_INPUT, BadInput

URL = "postgresql://farm:s3cret@db.example.internal:5432/farm"


@pytest.fixture(autouse=True)
def no_registry_environment(monkeypatch):
    monkeypatch.delenv(REGISTRY_ENV, raising=False)
    monkeypatch.delenv(REGISTRY_FILE_ENV, raising=False)


def test_the_url_comes_from_the_file(monkeypatch, tmp_path):
    path = tmp_path / "registry-url"
    path.write_text(f"  {URL}\n")  # as `echo URL > file` or a Secret with a trailing newline writes it
    monkeypatch.setenv(REGISTRY_FILE_ENV, str(path))
    assert registry_url(None) == URL


def test_a_registry_given_on_the_command_line_wins_over_the_file(monkeypatch, tmp_path):
    path = tmp_path / "registry-url"
    path.write_text(URL)
    monkeypatch.setenv(REGISTRY_FILE_ENV, str(path))
    assert registry_url("sqlite:///elsewhere.db") == "sqlite:///elsewhere.db"


def test_without_either_the_embedded_registry(monkeypatch):
    assert registry_url(None) == default_registry_url()
    monkeypatch.setenv(REGISTRY_FILE_ENV, " ")  # set but blank: as if unset, like FARM_REGISTRY=""
    assert registry_url(None) == default_registry_url()


def test_both_set_is_refused(monkeypatch, tmp_path):
    path = tmp_path / "registry-url"
    path.write_text(URL)
    monkeypatch.setenv(REGISTRY_FILE_ENV, str(path))
    monkeypatch.setenv(REGISTRY_ENV, URL)
    with pytest.raises(BadInput, match=f"both {REGISTRY_ENV} and {REGISTRY_FILE_ENV}") as caught:
        registry_url(URL)  # typer hands FARM_REGISTRY over as the option
    assert caught.value.exit_code == EXIT_BAD_INPUT


@pytest.mark.parametrize(("content", "says"), [
    (b"", "is empty"), (b" \n\t\n", "is empty"), (b"\xff\xfe\x00", "is not text"),
    (f"{URL}\nsqlite:///other.db\n".encode(), "more than one line"),
    (b"x" * (64 * 1024 + 1), "larger than 64 KiB"),
])
def test_a_file_that_holds_no_url_is_refused(monkeypatch, tmp_path, content, says):
    path = tmp_path / "registry-url"
    path.write_bytes(content)
    monkeypatch.setenv(REGISTRY_FILE_ENV, str(path))
    with pytest.raises(BadInput, match=says) as caught:
        registry_url(None)
    assert caught.value.exit_code == EXIT_BAD_INPUT and str(path) in str(caught.value)
    assert "\n" not in str(caught.value) and "s3cret" not in str(caught.value)


def test_a_file_that_cannot_be_read_is_refused(monkeypatch, tmp_path):
    for path, says in ((tmp_path / "missing", "cannot read"), (tmp_path, "not a regular file")):
        monkeypatch.setenv(REGISTRY_FILE_ENV, str(path))
        with pytest.raises(BadInput, match=says) as caught:
            registry_url(None)
        assert caught.value.exit_code == EXIT_BAD_INPUT and str(path) in str(caught.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 0000")
def test_a_file_without_read_permission_is_refused(monkeypatch, tmp_path):
    path = tmp_path / "registry-url"
    path.write_text(URL)
    path.chmod(0)
    monkeypatch.setenv(REGISTRY_FILE_ENV, str(path))
    with pytest.raises(BadInput, match="cannot read .*Permission denied"):
        registry_url(None)
