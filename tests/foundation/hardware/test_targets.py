"""User targets: parsing, canonical form per fingerprint, the registry key, TVM round trip."""

from __future__ import annotations

import json

import pytest

from foundation.errors import FarmError
from foundation.hardware.fingerprint import fingerprint_from_details
from foundation.hardware.targets import (
    TARGET_OPTIONS,
    canonical_target,
    parse_target_kind,
    target_json,
    to_tvm_target,
)

CPU = fingerprint_from_details("cpu", {
    "arch": "x86_64", "vendor": "AuthenticAMD", "model": "AMD EPYC 9654", "features": ["avx2", "avx512f"],
    "cores": 2, "llvm_mcpu": "znver4", "llvm_triple": "x86_64-unknown-linux-gnu",
})
A100 = fingerprint_from_details("cuda", {
    "name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "sm_count": 108, "memory_gib": 80,
    "host_triple": "x86_64-unknown-linux-gnu",
})
T4 = fingerprint_from_details("cuda", {"name": "Tesla T4", "compute_capability": "7.5", "sm_count": 40,
                                       "memory_gib": 15})


@pytest.mark.parametrize("user, kind", [
    ("llvm", "llvm"), (" LLVM ", "llvm"), ("cuda", "cuda"),
    ('{"kind": "llvm", "mcpu": "znver4"}', "llvm"), ('{"kind":"cuda","arch":"sm_86"}', "cuda"),
])
def test_parse_target_kind(user, kind):
    assert parse_target_kind(user) == kind


@pytest.mark.parametrize("user, says", [
    ("tpu", "use llvm, cuda, or a TVM target JSON object"),
    ("", "use llvm, cuda"),
    ("rocm", "does not tune it yet"),
    ('{"kind": "vulkan"}', "does not tune it yet"),
    ('{"kind": "llvm", ', "malformed JSON"),
    ('{"mcpu": "znver4"}', 'no "kind"'),
    ('["llvm"]', "not a JSON object"),
    ("llvm -mcpu=znver4", "command-line target form"),
    ("cpu", "use llvm"),
])
def test_unknown_targets_are_refused_with_a_fix(user, says):
    with pytest.raises(FarmError) as caught:
        parse_target_kind(user)
    assert caught.value.problem.startswith("unknown target")
    assert says in str(caught.value)


DEEP = "[" * 2000 + "]" * 2000


@pytest.mark.parametrize("user", [
    DEEP,
    '{"kind": "llvm", "mattr": ' + DEEP + "}",
    # Deep enough for JSON, too deep for what reads the target next (its checks recurse per host).
    '{"kind": "cuda", "host": ' + '{"kind": "llvm", "host": ' * 900 + "1" + "}" * 901,
    '{"kind": "cuda", "host": ' + json.dumps(DEEP) + "}",
])
def test_a_target_nested_too_deeply_is_bad_input_in_one_short_line(user):
    """JSON's decoder raised RecursionError: `farm submit` exited 70, the coordinator answered INTERNAL."""
    with pytest.raises(FarmError) as caught:
        canonical_target(user, A100 if '"cuda"' in user else CPU)
    assert caught.value.exit_code == 2 and "nested too deeply" in caught.value.problem
    assert len(str(caught.value)) < 500


@pytest.mark.parametrize("user, says", [
    ('{"kind": "llvm", "num-cores": -4}', "num-cores must be an integer from 1 to 4096, got -4"),
    ('{"kind": "cuda", "host": {"kind": "llvm", "num-cores": -4}}', "num-cores must be an integer from 1 to 4096"),
    ('{"kind": "cuda", "host": {"kind": "llvm", "mcpu": ""}}', "mcpu must be a non-empty string"),
    ('{"kind": "cuda", "host": 5}', "host must be a target"),
    # Attributes TVM rejects, refused before a job is written (it failed once started).
    ('{"kind": "llvm", "foo": "bar"}', "target attribute 'foo' is not one TVM's llvm targets take"),
    ('{"kind": "cuda", "mattr": ["+avx2"]}', "target attribute 'mattr' is not one TVM's cuda targets take"),
    ('{"kind": "llvm", "keys": [1, 2]}', "keys must be a list of strings, got [1, 2]"),
    ('{"kind": "llvm", "libs": {"a": {}}}', "libs must be a list of strings"),
    ('{"kind": "llvm", "fast-math": 1}', "fast-math must be true or false"),
    ('{"kind": "cuda", "host": {"kind": "llvm", "arch": "sm_80"}}', "'arch' is not one TVM's llvm targets take"),
])
def test_attributes_no_device_has_are_refused_on_the_target_and_its_host(user, says):
    """A CUDA target's host was not checked: num-cores -4 there went into the registry key, and a
    host that is a number failed canonical_target with TypeError (INTERNAL at the coordinator)."""
    with pytest.raises(FarmError) as caught:
        canonical_target(user, A100 if '"cuda"' in user else CPU)
    assert caught.value.exit_code == 2 and says in caught.value.problem


def test_llvm_canonical_fills_in_the_cpu_and_user_keys_win():
    assert canonical_target("llvm", CPU) == {
        "kind": "llvm", "mtriple": "x86_64-unknown-linux-gnu", "mcpu": "znver4", "num-cores": 2,
    }
    mine = canonical_target('{"kind": "llvm", "mcpu": "x86-64-v3", "num-cores": 1}', CPU)
    assert mine["mcpu"] == "x86-64-v3" and mine["num-cores"] == 1
    assert mine["mtriple"] == "x86_64-unknown-linux-gnu"


def test_cuda_canonical_has_what_metaschedule_needs():
    target = canonical_target("cuda", A100)
    assert target == {
        "kind": "cuda", "arch": "sm_80", "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
        "thread_warp_size": 32, "host": {"kind": "llvm", "mtriple": "x86_64-unknown-linux-gnu"},
    }
    assert canonical_target("cuda", T4)["arch"] == "sm_75"
    assert canonical_target("cuda", T4)["host"] == {"kind": "llvm"}
    mine = canonical_target('{"kind": "cuda", "arch": "sm_80a", "host": {"kind": "llvm", "mcpu": "znver4"}}', A100)
    assert mine["arch"] == "sm_80a"
    assert mine["host"] == {"kind": "llvm", "mtriple": "x86_64-unknown-linux-gnu", "mcpu": "znver4"}


def test_target_and_fingerprint_kinds_must_match():
    with pytest.raises(FarmError, match="needs a cuda fingerprint"):
        canonical_target("cuda", CPU)
    with pytest.raises(FarmError, match="needs a cpu fingerprint"):
        canonical_target("llvm", A100)


def test_target_json_is_a_stable_key():
    a = canonical_target("llvm", CPU)
    b = dict(reversed(list(a.items())))
    assert target_json(a) == target_json(b)
    assert target_json(a) == '{"kind":"llvm","mcpu":"znver4","mtriple":"x86_64-unknown-linux-gnu","num-cores":2}'
    assert json.loads(target_json(canonical_target("cuda", A100))) == canonical_target("cuda", A100)
    with pytest.raises(FarmError):
        target_json({"mcpu": "znver4"})


def test_llvm_target_round_trips_through_tvm():
    target = to_tvm_target(canonical_target("llvm", CPU))
    assert target.kind.name == "llvm"
    assert str(target.attrs["mcpu"]) == "znver4"
    assert int(target.attrs["num-cores"]) == 2
    assert str(target.attrs["mtriple"]) == "x86_64-unknown-linux-gnu"


def test_cuda_target_builds_without_a_gpu():
    target = to_tvm_target(canonical_target("cuda", A100))
    assert target.kind.name == "cuda"
    assert str(target.attrs["arch"]) == "sm_80"
    assert int(target.attrs["max_threads_per_block"]) == 1024
    assert int(target.attrs["max_shared_memory_per_block"]) == 49152
    assert target.host is not None and target.host.kind.name == "llvm"
    assert str(target.host.attrs["mtriple"]) == "x86_64-unknown-linux-gnu"


@pytest.mark.parametrize("kind", sorted(TARGET_OPTIONS))
def test_the_attributes_checked_are_those_the_installed_tvm_takes(kind):
    from tvm.target import TargetKind

    assert TARGET_OPTIONS[kind] == dict(TargetKind.options_from_name(kind))


@pytest.mark.parametrize("target", [
    {"kind": "llvm", "mtriple": "x86_64-unknown-linux-gnu", "mcpu": "nonsense-cpu"},
    {"kind": "cuda", "arch": "sm_80", "host": {"kind": "llvm", "mtriple": "x86_64-unknown-linux-gnu", "mcpu": "no9"}},
], ids=["llvm", "cuda-host"])
def test_a_cpu_llvm_does_not_take_is_refused_before_tvm_makes_the_target(target):
    """Well formed, so a registration carrying it is taken (without TVM); TVM itself would fall
    back to a generic CPU, or crash on a triple LLVM cannot place."""
    with pytest.raises(FarmError, match="LLVM here does not take the CPU"):
        to_tvm_target(target)


def test_tvm_rejection_becomes_a_farm_error():
    with pytest.raises(FarmError, match="TVM rejects the target"):
        to_tvm_target({"kind": "llvm", "no-such-attribute": 1})
