"""Fixtures of the deploy/ recipe tests: the compose file, its example environment, the dashboard."""

from __future__ import annotations

import json

import pytest
import yaml

from support.deploy_recipes import COMPOSE_DIR, COMPOSE_FILE, DASHBOARD, read_compose_env_file


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def compose_env() -> dict[str, str]:
    return read_compose_env_file(COMPOSE_DIR / "example.env")


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())
