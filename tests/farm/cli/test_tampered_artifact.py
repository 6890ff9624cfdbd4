"""An artifact tampered with consistently (bytes, size and sha256 replaced together) passes the
digest check and still cannot load: it is corrupt, never a hit; submit builds again."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3

import pytest

from support.farm_inprocess import run_farm_inprocess
from support.farm_process import one_error_line, run_farm
from support.shared_libraries import python_extension_library

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("replacement, said", [
    (lambda: os.urandom(4096), "cannot be loaded: it is not an ELF file"),
    (python_extension_library, "cannot be loaded: it is a shared library but not one TVM built"),
], ids=["garbage", "another library"])
def test_a_consistently_tampered_artifact_is_corrupt_and_never_a_hit(farm_exe, tuned_mlp_tiny, tmp_path,
                                                                      replacement, said):
    home = tuned_mlp_tiny.copy_to(tmp_path / "home")
    garbage = replacement()
    with sqlite3.connect(home / "registry.db") as db:
        tampered = {row[0] for row in db.execute("SELECT id FROM artifacts")}
        db.execute("UPDATE artifacts SET library = ?, size = ?, sha256 = ?",
                   (garbage, len(garbage), hashlib.sha256(garbage).hexdigest()))
    db.close()
    ran = run_farm_inprocess("run", "mlp-tiny", "llvm", "2", home=home)
    line = one_error_line(ran.stderr)
    assert ran.returncode == 4 and "is corrupt" in line and said in line, line
    submitted = run_farm(farm_exe, home, "submit", "mlp-tiny", "llvm", "2", "--trials", "4", "--runs", "2", "--json")
    assert submitted.returncode == 0, submitted.stderr
    again = json.loads(submitted.stdout)
    assert again["cache_hit"] is False and again["artifact"]["id"] not in tampered
    with sqlite3.connect(home / "registry.db") as db:
        reasons = dict(db.execute("SELECT id, invalid_reason FROM artifacts WHERE invalidated_at IS NOT NULL"))
    db.close()
    assert set(reasons) == tampered and all("cannot be loaded" in why for why in reasons.values()), reasons
