"""Hardware fingerprints: real detection here, canonical ids, the TVM-free cache, CUDA details."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import foundation.hardware.fingerprint as fingerprint_module
from foundation.errors import FarmError
from foundation.hardware.fingerprint import (
    Fingerprint,
    cached_cpu_fingerprint,
    cpu_fingerprint,
    cuda_fingerprint,
    fingerprint_for,
    fingerprint_from_details,
)
from foundation.hardware.isa_features import CODEGEN_FEATURES

REPO = Path(__file__).resolve().parents[3]

A100 = {"name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "sm_count": 108, "memory_gib": 80,
        "host_triple": "x86_64-unknown-linux-gnu"}
T4 = {"name": "Tesla T4", "compute_capability": "7.5", "sm_count": 40, "memory_gib": 15,
      "host_triple": "x86_64-unknown-linux-gnu"}

CPU = {"arch": "x86_64", "vendor": "GenuineIntel", "model": "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz",
       "features": ["sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512cd", "avx512dq",
                    "avx512vl", "avx512_vnni"],
       "cores": 2, "llvm_mcpu": "cascadelake", "llvm_triple": "x86_64-unknown-linux-gnu",
       "l2_kib": 1024, "l3_kib": 28160}


def _run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture(scope="module")
def detected() -> Fingerprint:
    return cpu_fingerprint()


def test_detects_this_cpu(detected):
    assert detected.kind == "cpu"
    assert re.fullmatch(r"cpu-[0-9a-f]{12}", detected.id)
    for field in ("arch", "vendor", "model", "features", "cores", "llvm_mcpu", "llvm_triple"):
        assert field in detected.details, field
    assert detected.details["cores"] >= 1
    assert detected.details["llvm_mcpu"] and detected.details["llvm_mcpu"] in detected.summary
    assert set(detected.details["features"]) <= CODEGEN_FEATURES
    assert list(detected.details) == sorted(detected.details)
    for excluded in ("hostname", "frequency", "tvm"):
        assert excluded not in detected.details


def test_id_is_stable_across_calls_and_processes(detected):
    assert cpu_fingerprint() == detected
    other = _run_python("from foundation.hardware.fingerprint import cpu_fingerprint; print(cpu_fingerprint().id)")
    assert other == detected.id
    assert fingerprint_for("llvm").id == detected.id


def test_json_round_trip(detected):
    document = json.loads(json.dumps(detected.to_json()))
    assert Fingerprint.from_json(document) == detected


def test_canonical_form_ignores_order_spelling_and_irrelevant_flags():
    reordered = dict(reversed(list(CPU.items())))
    reordered["features"] = ["avx512vnni", *reversed(CPU["features"][:-1]), "hypervisor", "ssbd", "AVX2"]
    reordered["model"] = "  Intel(R) Xeon(R)   Gold 6248 CPU @ 2.50GHz "
    reordered["cores"] = "2"
    assert fingerprint_from_details("cpu", reordered) == fingerprint_from_details("cpu", CPU)


@pytest.mark.parametrize("change", [
    {"features": CPU["features"] + ["avx512_bf16"]},
    {"features": [f for f in CPU["features"] if f != "avx512_vnni"]},
    {"cores": 4},
    {"llvm_mcpu": "skylake-avx512"},
    {"l3_kib": 36608},
])
def test_anything_that_changes_code_or_speed_changes_the_id(change):
    assert fingerprint_from_details("cpu", {**CPU, **change}).id != fingerprint_from_details("cpu", CPU).id


def test_incomplete_or_unknown_details_are_refused():
    with pytest.raises(FarmError, match="lack llvm_mcpu"):
        fingerprint_from_details("cpu", {k: v for k, v in CPU.items() if k != "llvm_mcpu"})
    with pytest.raises(FarmError, match="unknown fingerprint kind"):
        fingerprint_from_details("rocm", CPU)
    with pytest.raises(FarmError, match="cores"):
        fingerprint_from_details("cpu", {**CPU, "cores": "two"})


def test_aarch64_cpuinfo_uses_implementer_and_part(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nBogoMIPS\t: 2100.00\n"
        "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm "
        "jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs "
        "paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng\n"
        "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd40\n"
        "CPU revision\t: 1\n\nprocessor\t: 1\nCPU implementer\t: 0x42\n"
    )
    monkeypatch.setattr(fingerprint_module, "_CPUINFO", cpuinfo)
    monkeypatch.setattr(fingerprint_module.platform, "machine", lambda: "aarch64")
    details = fingerprint_module._cheap_cpu_details()
    assert details["arch"] == "aarch64"
    assert details["vendor"] == "ARM" and details["model"] == "ARM part 0xd40"
    assert details["features"] == ["asimd", "asimddp", "bf16", "fphp", "i8mm", "sve"]


def test_cache_is_written_and_a_hit_does_not_import_tvm(tmp_path, detected):
    code = f"""
        import sys
        from pathlib import Path
        from foundation.hardware.fingerprint import cached_cpu_fingerprint
        fp = cached_cpu_fingerprint(Path({str(tmp_path)!r}))
        print(fp.id, 'tvm' in sys.modules)
    """
    first = _run_python(code)
    assert first == f"{detected.id} True"
    files = list(tmp_path.glob("cpu-fingerprint-*.json"))
    assert len(files) == 1
    assert json.loads(files[0].read_text())["fingerprint"]["id"] == detected.id
    second = _run_python(code)
    assert second == f"{detected.id} False"


def test_cache_recomputes_when_its_key_or_content_changes(tmp_path, monkeypatch, detected):
    assert cached_cpu_fingerprint(tmp_path) == detected
    (cache_file,) = tmp_path.glob("cpu-fingerprint-*.json")
    cache_file.write_text("{not json")
    assert cached_cpu_fingerprint(tmp_path) == detected
    assert json.loads(cache_file.read_text())["fingerprint"]["id"] == detected.id

    import foundation.hardware.versions

    monkeypatch.setattr(foundation.hardware.versions, "tvm_version", lambda: "0.99.0")
    assert cached_cpu_fingerprint(tmp_path) == detected
    assert len(list(tmp_path.glob("cpu-fingerprint-*.json"))) == 2


def test_cuda_fingerprint_without_a_gpu():
    import tvm

    if tvm.cuda(0).exist:
        fp = cuda_fingerprint()
        assert re.fullmatch(r"cuda-[0-9a-f]{12}", fp.id)
        pytest.skip("this machine has a CUDA device: checked detection instead of the error")
    with pytest.raises(FarmError, match="CUDA device 0"):
        cuda_fingerprint(0)
    with pytest.raises(FarmError, match="CUDA device 0"):
        fingerprint_for("cuda")


def test_cuda_canonicalization_from_described_devices():
    a100 = fingerprint_from_details("cuda", A100)
    assert re.fullmatch(r"cuda-[0-9a-f]{12}", a100.id)
    assert a100.summary == "NVIDIA A100-SXM4-80GB, sm_80, 108 SMs, 80 GiB"
    assert a100.details["compute_capability"] == "8.0"
    for spelling in (8.0, "sm_80", "80", (8, 0)):
        assert fingerprint_from_details("cuda", {**A100, "compute_capability": spelling}) == a100
    t4 = fingerprint_from_details("cuda", T4)
    assert t4.id != a100.id and "sm_75" in t4.summary
    a100_40 = {**A100, "name": "NVIDIA A100-SXM4-40GB", "memory_gib": 40}
    assert fingerprint_from_details("cuda", a100_40).id != a100.id
    with pytest.raises(FarmError, match="lack sm_count"):
        fingerprint_from_details("cuda", {k: v for k, v in A100.items() if k != "sm_count"})


def test_gpu_memory_rounds_the_same_from_runtime_and_nvidia_smi():
    # cudaDeviceProp.totalGlobalMem vs nvidia-smi memory.total (MiB) for the same boards.
    assert fingerprint_module._gib(85_097_971_712) == fingerprint_module._gib(81_920 * 2**20) == 80
    assert fingerprint_module._gib(15_843_721_216) == fingerprint_module._gib(15_360 * 2**20) == 15


def test_a_gpu_fingerprint_is_of_the_device_asked_for():
    """An agent on --device cuda:3 describes device 3, not whichever GPU CUDA numbers first
    (on a box without GPUs the refusal names the device it looked for)."""
    from foundation.hardware.fingerprint import local_fingerprint

    if shutil.which("nvidia-smi"):
        pytest.skip("a box with NVIDIA GPUs: device 3 may exist here")
    with pytest.raises(FarmError, match="no CUDA device 3 on this machine"):
        local_fingerprint("cuda", 3)


def test_a_view_stands_for_an_older_cpu_as_a_fingerprint_and_target_of_its_own(tmp_path, monkeypatch, detected):
    from foundation.hardware.device_features import VECTOR_FIELDS, device_vector
    from foundation.hardware.targets import canonical_target, codegen_features

    if detected.details["arch"] != "x86_64" or "avx2" not in detected.details["features"]:
        pytest.skip("no older x86 CPU with AVX2 for this box to stand for")
    monkeypatch.setenv(fingerprint_module.CPU_VIEW_ENV, "haswell")
    view = cpu_fingerprint()
    assert view.id != detected.id and view.details["llvm_mcpu"] == "haswell"
    haswell = codegen_features({"kind": "llvm", "mcpu": "haswell"})
    assert set(view.details["features"]) == haswell & set(detected.details["features"]) and "avx2" in haswell
    assert not [f for f in view.details["features"] if f.startswith("avx512")]
    assert canonical_target("llvm", view)["mcpu"] == "haswell"
    assert dict(zip(VECTOR_FIELDS, device_vector(view.details)))["vector_bits"] == 256
    # Cached apart from the box's own.
    assert cached_cpu_fingerprint(tmp_path).id == view.id
    monkeypatch.delenv(fingerprint_module.CPU_VIEW_ENV)
    assert cached_cpu_fingerprint(tmp_path).id == detected.id
    assert len(list(tmp_path.glob("cpu-fingerprint-*.json"))) == 2


def test_a_view_of_a_cpu_llvm_does_not_know_or_newer_than_the_box_is_refused(monkeypatch, detected):
    from foundation.hardware.targets import codegen_features

    monkeypatch.setenv(fingerprint_module.CPU_VIEW_ENV, "no-such-cpu")
    with pytest.raises(FarmError, match=f"{fingerprint_module.CPU_VIEW_ENV}=no-such-cpu: LLVM does not know"):
        cpu_fingerprint()
    if detected.details["arch"] != "x86_64":
        return
    newer = next((cpu for cpu in ("skylake-avx512", "sapphirerapids", "graniterapids")
                  if codegen_features({"kind": "llvm", "mcpu": cpu}) - set(detected.details["features"])), None)
    if newer is None:
        pytest.skip("this box has every feature of the newest x86 CPUs named here")
    monkeypatch.setenv(fingerprint_module.CPU_VIEW_ENV, newer)
    with pytest.raises(FarmError, match="this CPU lacks"):
        cpu_fingerprint()
