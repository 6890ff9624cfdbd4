"""The recipes' schema migration: each recipe runs `farm registry upgrade` before the coordinator
(compose: a one-shot service the coordinator waits for; Kubernetes: an init container; systemd:
ExecStartPre), and the command line each one runs, parsed out of its file, upgrades a registry
made by the previous schema revision, creates one in an empty database, and leaves a current
one alone, on SQLite and on the real PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine
from typer.testing import CliRunner

from farm.cli.app import app
from foundation.errors import NotFound, RegistryError
from foundation.registry import RegistryStore, migrate
from foundation.registry.engine import parse_registry_url

from support.deploy_recipes import COMPOSE_FILE, SYSTEMD, find, pod_template, read_env_file

INSTALLED_FARM = "/opt/tvm-farm/.venv/bin/farm"
RECIPES = ("compose", "kubernetes", "systemd")


def _service_settings(unit: Path) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    section = None
    for line in unit.read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service" and line and not line.startswith(("#", ";")):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def upgrade_argv(recipe: str) -> list[str]:
    """The farm command line (after the entrypoint) the recipe runs before its coordinator, with
    what the recipe says about when it runs checked on the way."""
    if recipe == "compose":
        services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
        coordinator, migrate_service = services["coordinator"], services["migrate"]
        assert coordinator["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert migrate_service["restart"] == "no", "a one-shot service: restarted, it would run forever"
        assert migrate_service["environment"]["FARM_REGISTRY_FILE"] == coordinator["environment"]["FARM_REGISTRY_FILE"]
        sources = [{s["source"] if isinstance(s, dict) else s for s in service["secrets"]}
                   for service in (migrate_service, coordinator)]
        assert sources[0] <= sources[1], "the migration reads the coordinator's registry secret"
        assert migrate_service["image"] == coordinator["image"]
        return [str(arg) for arg in migrate_service["command"]]
    if recipe == "kubernetes":
        spec = pod_template(find("Deployment", "farm-coordinator"))["spec"]
        [init] = spec["initContainers"]
        [coordinator] = spec["containers"]
        registry = {e["name"]: e for e in init["env"]}["FARM_REGISTRY_FILE"]
        assert registry == {e["name"]: e for e in coordinator["env"]}["FARM_REGISTRY_FILE"]
        assert init["image"] == coordinator["image"]
        assert "command" not in init, "the image's entrypoint is farm"
        return list(init["args"])
    service = _service_settings(SYSTEMD / "farm-coordinator.service")
    [pre] = service["ExecStartPre"]
    assert not pre.startswith(("-", "+", "!", "@")), "a failed migration must fail the start, as root never"
    program, *argv = pre.split()
    assert program == INSTALLED_FARM and service["ExecStart"][0].split()[0] == INSTALLED_FARM
    return argv


def registry_file_setting(recipe: str) -> str:
    """Where the recipe puts the registry's URL: the file its FARM_REGISTRY_FILE names (compose:
    a secret in /run/secrets; Kubernetes: a Secret volume; systemd: a file under /etc/tvm-farm,
    named in the EnvironmentFile), never FARM_REGISTRY."""
    if recipe == "compose":
        environment = yaml.safe_load(COMPOSE_FILE.read_text())["services"]["migrate"]["environment"]
    elif recipe == "kubernetes":
        [init] = pod_template(find("Deployment", "farm-coordinator"))["spec"]["initContainers"]
        environment = {e["name"]: e.get("value") for e in init["env"]}
    else:
        environment = read_env_file(SYSTEMD / "coordinator.env")
    assert "FARM_REGISTRY" not in environment
    return environment["FARM_REGISTRY_FILE"]


def run_recipe_upgrade(recipe: str, url: str, tmp_path: Path):
    """The recipe's command, in-process, with the registry URL in a file as the recipe puts it
    (FARM_REGISTRY_FILE), here under tmp_path in place of the recipe's own path."""
    path = tmp_path / Path(registry_file_setting(recipe)).name
    path.write_text(url + "\n")
    return CliRunner().invoke(app, upgrade_argv(recipe), env={"FARM_REGISTRY": None, "FARM_REGISTRY_FILE": str(path)})


def previous_revision() -> str:
    script = ScriptDirectory.from_config(migrate.alembic_config())
    previous = script.get_revision(migrate.head_revision()).down_revision
    assert isinstance(previous, str), previous
    return previous


def create_at_previous_revision(url: str) -> str:
    parsed = parse_registry_url(url)
    if parsed.get_backend_name() == "sqlite":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(parsed)
    previous = previous_revision()
    try:
        with engine.begin() as connection:
            command.upgrade(migrate.alembic_config(connection), previous)
            assert migrate.current_revision(connection) == previous
    finally:
        engine.dispose()
    return previous


def revision_of(url: str) -> str | None:
    """The schema revision of the database at ``url``; None where there is none (nor a file)."""
    parsed = parse_registry_url(url)
    if parsed.get_backend_name() == "sqlite" and not Path(parsed.database).exists():
        return None
    engine = create_engine(parsed)
    try:
        with engine.connect() as connection:
            return migrate.current_revision(connection)
    finally:
        engine.dispose()


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipes_run_the_upgrade_before_the_coordinator(recipe):
    argv = upgrade_argv(recipe)
    assert argv[:2] == ["registry", "upgrade"] and "--create" in argv, argv
    assert "--registry" not in argv, "the URL (with its password) comes from FARM_REGISTRY, not a command line"


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_upgrades_a_registry_of_the_previous_revision(recipe, registry_url, tmp_path):
    previous = create_at_previous_revision(registry_url)
    with pytest.raises(RegistryError, match=f"revision {previous}.*farm registry upgrade"):
        RegistryStore(registry_url)  # what a coordinator does without the recipe's step
    result = run_recipe_upgrade(recipe, registry_url, tmp_path)
    assert result.exit_code == 0, result.output
    assert revision_of(registry_url) == migrate.head_revision()
    RegistryStore(registry_url).dispose()  # the coordinator's own opening accepts it now
    # Every later start runs the step again: a current registry is left as it is.
    again = run_recipe_upgrade(recipe, registry_url, tmp_path)
    assert again.exit_code == 0, again.output
    assert revision_of(registry_url) == migrate.head_revision()


def test_recipe_upgrade_creates_the_registry_on_the_first_start(registry_url, tmp_path):
    """The recipes' first start: an empty database becomes a registry at the newest revision
    (every recipe runs the same command line: the test above checks that each one runs it)."""
    result = run_recipe_upgrade("compose", registry_url, tmp_path)
    assert result.exit_code == 0, result.output
    assert revision_of(registry_url) == migrate.head_revision()


def test_upgrade_without_create_still_refuses_an_empty_database(registry_url):
    """--create is what lets the recipes' step serve the first start; without it, upgrade
    creates nothing (not found: exit 3)."""
    result = CliRunner().invoke(app, ["registry", "upgrade"], env={"FARM_REGISTRY": registry_url})
    assert isinstance(result.exception, NotFound) and result.exception.exit_code == 3, result.exception
    assert revision_of(registry_url) is None
