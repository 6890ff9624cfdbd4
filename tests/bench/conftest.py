"""The bench scripts are not a package: their folder goes on sys.path, as the scripts put it themselves."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
# Last, not first: bench/profile.py would otherwise be the `profile` every later import in this worker
# gets (cProfile's, torch.export's), in place of the standard library's.
if str(BENCH) not in sys.path:
    sys.path.append(str(BENCH))


@pytest.fixture(scope="session")
def tuned_mlp_home(tmp_path_factory, farm_exe) -> Path:
    """A farm home whose registry holds mlp-tiny batch 1 tuned with 4 trials per task (slow tests only)."""
    home = tmp_path_factory.mktemp("bench-tuned-home")
    done = subprocess.run([farm_exe, "submit", "mlp-tiny", "llvm", "1", "--trials-per-task", "4", "--json"],
                          capture_output=True, text=True, timeout=900, env={**os.environ, "FARM_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    return home
