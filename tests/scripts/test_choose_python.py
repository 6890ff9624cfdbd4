"""scripts/choose_python: the Python on PATH, or the distribution's build of the same version in
place of one built without profile-guided optimization; never another version.

Real interpreters, as this box has them: a case this box cannot show (no distribution Python,
no unoptimized build of its version, no other version) skips, saying which.
"""

from __future__ import annotations

import glob
import os
import runpy
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHOOSE = REPO / "scripts" / "choose_python"
CHOOSER = runpy.run_path(str(CHOOSE))  # its names, without running it
DISTRIBUTION = CHOOSER["DISTRIBUTION_PYTHON"]
DESCRIBE = ("import sys, sysconfig; print('%d.%d' % sys.version_info[:2], "
            "'--enable-optimizations' in (sysconfig.get_config_var('CONFIG_ARGS') or ''), sys.executable)")


def _described(python: str) -> tuple[str, bool, str] | None:
    try:
        done = subprocess.run([python, "-c", DESCRIBE], capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    if done.returncode != 0:
        return None
    version, pgo, executable = done.stdout.split()
    return version, pgo == "True", executable


def _interpreters() -> dict[str, tuple[str, bool]]:
    """Each Python 3 here but the distribution's: its path, its version, whether it says it was built with PGO."""
    found = {}
    candidates = [shutil.which("python3"), *glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3"))]
    for python in filter(None, candidates):
        described = _described(python)
        if described and os.path.realpath(described[2]) != os.path.realpath(DISTRIBUTION):
            found[described[2]] = described[:2]
    return found


def _chosen_by(python: str) -> str:
    done = subprocess.run([python, str(CHOOSE)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.strip()


def _distribution_version() -> str:
    described = _described(DISTRIBUTION) if os.access(DISTRIBUTION, os.X_OK) else None
    if described is None:
        pytest.skip(f"no distribution Python at {DISTRIBUTION}")
    # What the script asks of it before taking it: ensurepip (python3-venv) and Python.h (python3-dev).
    probe = subprocess.run([DISTRIBUTION, "-c", CHOOSER["PROBE"]], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0 or probe.stdout.split()[1:] != ["True"]:
        pytest.skip(f"{DISTRIBUTION} cannot make a venv or build an extension (python3-venv or python3-dev missing)")
    return described[0]


def test_an_unoptimized_build_gives_way_to_the_distributions_build_of_its_version():
    version = _distribution_version()
    unoptimized = [p for p, (v, pgo) in _interpreters().items() if v == version and not pgo]
    if not unoptimized:
        pytest.skip(f"no Python {version} built without --enable-optimizations here (pyenv's default build is one)")
    assert _chosen_by(unoptimized[0]) == DISTRIBUTION


def test_another_version_is_kept():
    version = _distribution_version()
    others = [p for p, (v, _) in _interpreters().items() if v != version]
    if not others:
        pytest.skip(f"no Python 3 other than {version} here")
    assert _chosen_by(others[0]) == others[0]


def test_the_distributions_python_keeps_itself():
    _distribution_version()
    assert _chosen_by(DISTRIBUTION) == _described(DISTRIBUTION)[2]
