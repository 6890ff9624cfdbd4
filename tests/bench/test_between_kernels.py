"""bench/between_kernels.py: its categories on TVM's own function names, its sums, and a tuned tiny model's report."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from between_kernels import (
    BETWEEN,
    BUILTINS,
    CATEGORIES,
    LAYOUT,
    PADDING,
    TUNED,
    UNTUNED,
    between_report,
    category_of,
)
from vm_calls import CallTimes

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "between_kernels.py"


def between(*args, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "FARM_HOME": str(home)})


@pytest.mark.parametrize(("name", "category"), [
    ("fused_reshape3_transpose_transpose11", LAYOUT),  # bert's heads, split and merged
    ("fused_transpose2_reshape41", LAYOUT),
    ("layout_transform1", LAYOUT),
    ("fused_expand_dims_layout_transform_prepacked", LAYOUT),
    ("pad3", PADDING),
    ("fused_pad_layout_transform2", PADDING),
    ("vm.builtin.alloc_tensor", BUILTINS),
    ("max_pool2d", UNTUNED),  # in the job's built-untuned list below
    ("fused_conv2d_NCHWc1_multiply1_add1_relu11_prepacked", TUNED),
    ("fused_conv2d_NCHWc1_multiply1_add1_relu12_prepacked", UNTUNED),  # its task, without the suffix, is listed
    ("fused_matmul_add_relu1", TUNED),
    ("fused_reshape_matmul3", TUNED),  # a move fused into a kernel is the kernel's time
    ("transpose_softmax", TUNED),
    ("reshape_max_pool2d", UNTUNED),
])
def test_each_function_falls_in_one_category(name, category):
    untuned = {"max_pool2d", "fused_conv2d_NCHWc1_multiply1_add1_relu12", "reshape_max_pool2d"}
    assert category_of(name, untuned) == category


def test_the_report_sums_every_call_once_and_shares_against_both_totals():
    times = CallTimes(runs=2)
    for _ in range(2):
        times.add("fused_conv2d_prepacked", 0.006)
        times.add("layout_transform", 0.001)
        times.add("max_pool2d", 0.002)
        times.add("vm.builtin.alloc_tensor", 0.0005)
        times.add("vm.builtin.alloc_tensor", 0.0005)
    report = between_report(times, whole_ms=12.5, built_untuned={"max_pool2d"})
    c = report["categories"]
    assert set(c) == set(CATEGORIES)
    assert report["profiled_sum_ms"] == pytest.approx(10.0)
    assert c[TUNED]["ms"] == pytest.approx(6.0) and c[LAYOUT]["ms"] == pytest.approx(1.0)
    assert c[UNTUNED]["ms"] == pytest.approx(2.0) and c[PADDING]["ms"] == 0.0
    assert c[BUILTINS]["ms"] == pytest.approx(1.0) and c[BUILTINS]["calls"] == pytest.approx(2.0)
    assert report["between_ms"] == pytest.approx(4.0)
    assert report["between_share_of_profiled"] == pytest.approx(0.4)
    assert report["between_share_of_whole"] == pytest.approx(4.0 / 12.5)
    assert sum(entry["share_of_profiled"] for entry in c.values()) == pytest.approx(1.0)
    assert [f["name"] for f in c[BUILTINS]["functions"]] == ["vm.builtin.alloc_tensor"]


@pytest.mark.slow
@pytest.mark.parametrize(("model", "form", "expected"), [
    ("bert-tiny", "prepacked", LAYOUT),  # the attention heads' reshapes and transposes
    ("resnet-tiny", "prepacked-nchwc", LAYOUT),  # the blocked activations' way back to NCHW
])
def test_the_categories_find_what_tvm_names_in_the_farm_lowering(model, form, expected):
    """The names are TVM's: lowered as the farm lowers a model, its functions include some in the category."""
    from foundation.compile import lower_for_tuning
    from foundation.domain.weights_layout import WeightsLayout
    from foundation.hardware.targets import to_tvm_target
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
    from foundation.models.loading import load_model

    install_lean_tensor_intrinsics("llvm")
    import tvm

    layout = WeightsLayout(form)
    loaded = load_model(model, 1)
    mod = loaded.mod.clone()
    mod["main"] = mod["main"].with_attr("num_input", len(loaded.inputs))
    lowered = lower_for_tuning(mod, to_tvm_target({"kind": "llvm"}), prepack=layout.prepacks,
                               block_activations=layout.blocks_activations)
    names = [gv.name_hint for gv, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    found = [n for n in names if category_of(n, set()) == expected]
    assert found, names
    assert any(category_of(n, set()) == TUNED for n in names)


def test_an_unknown_model_exits_2(tmp_path):
    done = between("no-such-net", home=tmp_path)
    assert done.returncode == 2 and "unknown model 'no-such-net'" in done.stderr


def test_without_a_registry_it_exits_3(tmp_path):
    done = between("mlp-tiny", home=tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: ")


def test_bad_counts_exit_2(tmp_path):
    done = between("mlp-tiny", "--runs", "0", home=tmp_path)
    assert done.returncode == 2 and "--runs" in done.stderr


@pytest.mark.slow
def test_a_tuned_model_is_split_into_kernels_and_what_lies_between(tuned_mlp_home, tmp_path):
    out = tmp_path / "between.json"
    done = between("mlp-tiny", "--runs", "3", "--out", str(out), home=tuned_mlp_home)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["built_untuned_from"] == "the artifact's job"
    categories = report["categories"]
    kernels = {f["name"] for c in (TUNED, UNTUNED) for f in categories[c]["functions"]}
    # Both matmuls, under their task's name or its prepacked form's: each where the job's note puts it.
    for task in ("fused_matmul_add_relu1", "fused_matmul1_add11"):
        (name,) = [n for n in kernels if n in (task, f"{task}_prepacked")]
        assert category_of(name, set(report["built_untuned"])) == (UNTUNED if task in report["built_untuned"]
                                                                   else TUNED)
    assert categories[BUILTINS]["calls"] > 0 and categories[LAYOUT]["ms"] == 0.0
    assert report["between_ms"] == pytest.approx(sum(categories[c]["ms"] for c in BETWEEN))
    assert 0 < report["whole_model_median_ms"] and 0 < report["profiled_sum_ms"]
    assert "between the tuned kernels" in done.stdout
