"""scripts/setup run again on a venv it made: the install runs only where pyproject.toml or the
extras changed; it installs with uv, or with pip where asked.

The script runs on a stand-in project (its own pyproject.toml, empty packages, no dependencies: the
installer fetches only what builds it, as scripts/setup does for the farm). Whether an install ran
is told by taking pip and uv out of the venv after the first run: a re-run that installs fails, one
that skips it passes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a venv made and a package built and installed: 14 s

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("agent", "coordinator", "farm", "foundation")  # what scripts/setup byte-compiles

PYPROJECT = """\
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "stand-in"
version = "0"

[project.optional-dependencies]
test = []
other = []

[tool.setuptools.packages.find]
include = ["agent*", "coordinator*", "farm*", "foundation*"]
"""


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "project"
    (root / "scripts").mkdir(parents=True)
    for script in ("setup", "install_with_uv", "choose_python"):
        shutil.copy(REPO / "scripts" / script, root / "scripts" / script)
    for package in PACKAGES:
        (root / package).mkdir()
        (root / package / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text(PYPROJECT)
    return root


def setup(project: Path, **env: str) -> subprocess.CompletedProcess:
    # PYTHONDONTWRITEBYTECODE as these machines set it (scripts/test unsets it for the suite): only
    # scripts/setup's own byte-compiling then leaves a __pycache__ in the project.
    return subprocess.run([str(project / "scripts" / "setup")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHON": sys.executable, "INSTALL_PROMTOOL": "0",
                               "PYTHONDONTWRITEBYTECODE": "1", **env}, cwd=project)


def site_packages(project: Path) -> Path:
    venv_python = project / ".venv" / "bin" / "python"
    return Path(subprocess.run([str(venv_python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())


def installed_by(project: Path) -> str:
    """What installed the stand-in project: the INSTALLER file pip and uv write beside it."""
    [record] = site_packages(project).glob("stand_in-*.dist-info")
    return (record / "INSTALLER").read_text().strip()


def without_installers(project: Path) -> None:
    """Take pip and uv out of the venv: from now on a run that installs fails."""
    shutil.rmtree(site_packages(project) / "pip")
    (project / ".venv" / "bin" / "uv").unlink()


def test_a_rerun_skips_the_install_until_the_project_or_the_extras_change(project):
    first = setup(project)
    assert first.returncode == 0, first.stderr
    assert (project / ".venv" / ".tvm-farm-installed").is_file()
    assert installed_by(project) == "uv", first.stderr
    without_installers(project)

    again = setup(project)
    assert again.returncode == 0, f"an installer ran again for the same project:\n{again.stderr}"
    assert (project / "farm" / "__pycache__").is_dir(), "the project is still byte-compiled"

    other_extras = setup(project, EXTRAS="test,other")
    assert other_extras.returncode != 0 and "No module named pip" in other_extras.stderr, other_extras.stderr

    (project / "pyproject.toml").write_text(PYPROJECT.replace('version = "0"', 'version = "1"'))
    changed = setup(project)
    assert changed.returncode != 0 and "No module named pip" in changed.stderr, changed.stderr
    assert not (project / ".venv" / ".tvm-farm-installed").exists(), "a failed install leaves no stamp"


def test_installer_pip_installs_with_pip(project):
    assert setup(project, INSTALLER="pip").returncode == 0
    assert installed_by(project) == "pip"
    assert not (project / ".venv" / "bin" / "uv").exists(), "uv was installed"
    assert (project / ".venv" / ".tvm-farm-installed").is_file()
