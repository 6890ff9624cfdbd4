"""bench/tvm_pipeline.py: its refusals, and a build reused only for the same question."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tvm_pipeline import FLOPS, LIBRARY, SUMMARY, reusable, wanted

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "tvm_pipeline.py"
TARGET = '{"kind": "llvm", "num-cores": 2}'


@pytest.mark.parametrize(("args", "word"), [
    (["--trials", "4", "--target-json", "llvm -num-cores 2"], "--target-json"),
    (["--trials", "-1", "--target-json", TARGET], "--trials"),
    (["--trials", "4", "--trials-per-task", "0", "--target-json", TARGET], "--trials-per-task"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, args, word):
    done = subprocess.run([sys.executable, str(SCRIPT), "mlp-tiny", *args, "--work", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and word in line
    assert not list(tmp_path.iterdir())


def test_a_build_is_reused_only_for_the_same_model_batch_budget_and_target(tmp_path):
    asked = wanted("mlp-tiny", 1, 12, 2, TARGET)
    assert reusable(tmp_path, asked) is None  # nothing there
    (tmp_path / SUMMARY).write_text(json.dumps({**asked, "records": 12, "tune_s": 3.0}))
    assert reusable(tmp_path, asked) is None  # no library yet (a build that died half-way)
    (tmp_path / LIBRARY).write_bytes(b"\x7fELF")
    (tmp_path / FLOPS).write_text("{}")
    assert reusable(tmp_path, asked)["records"] == 12
    for other in (wanted("mlp-tiny", 2, 12, 2, TARGET), wanted("mlp-tiny", 1, 16, 2, TARGET),
                  wanted("mlp-tiny", 1, 12, None, TARGET), wanted("mlp-tiny", 1, 12, 2, '{"kind": "llvm"}')):
        assert reusable(tmp_path, other) is None
