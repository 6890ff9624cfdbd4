"""The bench scripts are not a package: their folder goes on sys.path, as the scripts put it themselves."""

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
