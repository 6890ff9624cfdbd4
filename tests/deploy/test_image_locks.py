"""deploy/docker's locks: every pin hashed and within pyproject's constraints, the runtime
dependencies only, xgboost's CPU-only metadata wheel, and a Python on each image that
requires-python and every locked wheel accept."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.deploy_recipes import (
    DOCKERFILES,
    LOCK_LINE,
    ROOT,
    WHEELS,
    image_python,
    local_wheels,
    lock_path,
    parse_dockerfile,
    read_lock,
)


def every_lock() -> list[Path]:
    return sorted((ROOT / "deploy" / "docker").glob("requirements-py*.txt"))


def lock_extras(path: Path) -> tuple[str, ...]:
    """The farm's extras the lock holds besides its dependencies (its `# extras` line)."""
    [extras] = re.findall(r"^# extras (\S+)$", path.read_text(), re.M)
    return () if extras == "none" else tuple(extras.split(","))


def image_requirements(path: Path) -> list[str]:
    """What the lock at ``path`` must hold: pyproject.toml's dependencies and its extras'."""
    optional = project()["project"]["optional-dependencies"]
    return project()["project"]["dependencies"] + [r for e in lock_extras(path) for r in optional[e]]


def lock_hashes(text: str) -> dict[str, list[str]]:
    """{normalized name: its sha256 hashes}; a line with none, or unlike LOCK_LINE, is left out."""
    from packaging.utils import canonicalize_name

    return {canonicalize_name(m[1]): re.findall(r"--hash=sha256:([0-9a-f]{64})", m[3])
            for line in text.splitlines() if (m := LOCK_LINE.fullmatch(line))}


def lock_hash_problems(text: str) -> list[str]:
    """Lines of a lock that pip's --require-hashes would refuse or that the lock could not have
    written: a requirement without a hash, or one not pinned with ==."""
    return [f"not pinned and hashed: {line!r}" for line in text.splitlines()
            if line and not line.startswith("#") and not LOCK_LINE.fullmatch(line)]


@pytest.mark.parametrize("lock", every_lock(), ids=lambda path: path.name)
def test_every_locked_package_is_hashed_and_within_pyproject(lock):
    """Each line pins one version, with the sha256 of its wheels (the metadata-only xgboost's is
    the committed file's), at a version pyproject.toml's constraints allow (apache-tvm-ffi's
    ==0.1.14.post1, apache-tvm's range...)."""
    import hashlib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    text = lock.read_text()
    assert lock_hash_problems(text) == [], "rerun deploy/docker/lock"
    _, pins = read_lock(lock)
    hashes = lock_hashes(text)
    assert set(hashes) == set(pins) and all(hashes.values())
    for name, (_, wheel) in pins.items():
        if (WHEELS / wheel).is_file():
            assert hashes[name] == [hashlib.sha256((WHEELS / wheel).read_bytes()).hexdigest()], wheel
    for text_requirement in image_requirements(lock):
        requirement = Requirement(text_requirement)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        version = pins[canonicalize_name(requirement.name)][0]
        assert requirement.specifier.contains(version, prereleases=True), (text_requirement, version)
    assert pins["apache-tvm-ffi"][0] == "0.1.14.post1"


def test_lock_hash_check_rejects_an_unhashed_or_unpinned_line():
    good = "numpy==2.4.6 --hash=sha256:" + "0" * 64 + "  # numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert lock_hash_problems(f"# python 3.11\n{good}\n") == []
    for bad in ("numpy==2.4.6  # numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl",
                good.replace("==2.4.6", ">=2.4"), good.replace("0" * 64, "0" * 63), "numpy==2.4.6"):
        assert len(lock_hash_problems(f"{good}\n{bad}\n")) == 1, bad


def lock_script():
    """deploy/docker/lock, imported (it has no .py suffix)."""
    from importlib.machinery import SourceFileLoader
    from importlib.util import module_from_spec, spec_from_loader

    loader = SourceFileLoader("deploy_docker_lock", str(ROOT / "deploy" / "docker" / "lock"))
    module = module_from_spec(spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def project() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_only_packages() -> set[str]:
    """What the test extra adds to the runtime dependencies (pytest, ruff, grpcio-tools, docker...)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    runtime = set(lock_script().installed_closure(project()["project"]["dependencies"]))
    test = {canonicalize_name(Requirement(r).name) for r in project()["project"]["optional-dependencies"]["test"]}
    return test - runtime


test_only_packages.__test__ = False  # a helper, not a test


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_image_lock_holds_the_runtime_dependencies_only(kind):
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    lock = lock_path(image_python(parse_dockerfile(DOCKERFILES[kind])))
    python, pins = read_lock(lock)
    # The CPU image runs the coordinator, whose registry is PostgreSQL: the `postgres` extra; the
    # CUDA image runs agents only. Never `report` (matplotlib, pillow, fonttools) nor `test`.
    assert lock_extras(lock) == {"cpu": ("postgres",), "cuda": ()}[kind], lock_extras(lock)
    assert lock_script().IMAGE_EXTRAS[python] == lock_extras(lock), "rerun deploy/docker/lock"
    plotting = {canonicalize_name(Requirement(r).name) for r in project()["project"]["optional-dependencies"]["report"]}
    assert plotting and not plotting & set(pins), f"{lock.name} holds `farm report`'s {sorted(plotting & set(pins))}"
    requirements = image_requirements(lock)
    for text in requirements:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"the lock lacks the dependency {text}: rerun deploy/docker/lock"
        assert requirement.specifier.contains(pins[name][0], prereleases=True), f"{name}=={pins[name][0]} for {text}"
    assert {"pytest", "ruff", "grpcio-tools", "docker", "kubernetes-validate"} <= test_only_packages()
    assert not set(pins) & test_only_packages(), sorted(set(pins) & test_only_packages())
    # The lock of the tests' own Python is closed: what the locked packages need is locked too,
    # so a dependency added to pyproject.toml (or to a locked package) makes it stale.
    if python == f"{sys.version_info.major}.{sys.version_info.minor}":
        needed, complete = locked_closure(pins, requirements)
        assert needed <= set(pins), (sorted(needed - set(pins)), "rerun deploy/docker/lock")
        if complete:  # nothing left over either: a dependency dropped makes it stale too
            assert set(pins) == needed, (sorted(set(pins) - needed), "rerun deploy/docker/lock")


# --------------------------------------------------------------------------- xgboost, CPU only
def cpu_xgboost_version() -> str:
    """V of this venv's xgboost (its public part: a venv installed from a bundle has V+cpu)."""
    import importlib.metadata

    from packaging.version import Version

    return Version(importlib.metadata.version("xgboost")).public


def xgboost_lock_problems(pins: dict[str, tuple[str, str]], cpu_version: str) -> list[str]:
    """Where a lock brings more than the CPU-only xgboost: anything from nvidia, the full
    xgboost (its CUDA build), or an xgboost-cpu at another version than this venv's xgboost."""
    shim = f"{cpu_version}+cpu"
    problems = [f"{name}=={pins[name][0]} is locked: the images install nothing from nvidia"
                for name in sorted(pins) if name.startswith("nvidia")]
    if pins.get("xgboost") != (shim, f"xgboost-{shim}-py3-none-any.whl"):
        problems.append(f"xgboost is locked as {pins.get('xgboost')}, not the metadata-only xgboost=={shim}")
    cpu = pins.get("xgboost-cpu")
    if cpu is None or cpu[0] != cpu_version or not cpu[1].startswith(f"xgboost_cpu-{cpu_version}-"):
        problems.append(f"xgboost-cpu is locked as {cpu}, not at {cpu_version}, this venv's xgboost")
    return problems


@pytest.mark.parametrize("lock", every_lock(), ids=lambda path: path.name)
def test_image_lock_has_the_cpu_only_xgboost_and_nothing_from_nvidia(lock):
    _, pins = read_lock(lock)
    assert xgboost_lock_problems(pins, cpu_xgboost_version()) == [], "rerun deploy/docker/lock"
    shim = pins["xgboost"][1]
    assert local_wheels(pins) == {shim}, f"{shim} is in {WHEELS.relative_to(ROOT)}, and no other wheel the lock names"


def test_xgboost_lock_check_rejects_the_full_xgboost():
    """The locks as they were (xgboost with nvidia-nccl-cu12), and an xgboost-cpu of another version."""
    old = {"numpy": ("2.4.6", "numpy-2.4.6-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"),
           "nvidia-nccl-cu12": ("2.32.3", "nvidia_nccl_cu12-2.32.3-py3-none-manylinux_2_27_x86_64.whl"),
           "xgboost": ("3.2.0", "xgboost-3.2.0-py3-none-manylinux_2_28_x86_64.whl")}
    assert len(xgboost_lock_problems(old, "3.2.0")) == 3
    cpu = {"xgboost": ("3.2.0+cpu", "xgboost-3.2.0+cpu-py3-none-any.whl"),
           "xgboost-cpu": ("3.2.0", "xgboost_cpu-3.2.0-py3-none-manylinux_2_28_x86_64.whl")}
    assert xgboost_lock_problems(cpu, "3.2.0") == []
    assert xgboost_lock_problems(cpu, "3.1.3") == [
        "xgboost is locked as ('3.2.0+cpu', 'xgboost-3.2.0+cpu-py3-none-any.whl'), "
        "not the metadata-only xgboost==3.1.3+cpu",
        "xgboost-cpu is locked as ('3.2.0', 'xgboost_cpu-3.2.0-py3-none-manylinux_2_28_x86_64.whl'), "
        "not at 3.1.3, this venv's xgboost"]


def test_wheels_folder_holds_only_what_the_locks_name():
    named = set().union(*(local_wheels(read_lock(lock)[1]) for lock in every_lock()))
    assert {path.name for path in WHEELS.iterdir()} == named


def test_metadata_only_xgboost_is_what_deploy_docker_lock_writes():
    """The committed wheel is the script's (not stale, not edited): dist-info alone, requiring
    xgboost-cpu==V, each file as its RECORD says."""
    import base64
    import hashlib
    import zipfile
    from email.parser import Parser

    cpu_version = cpu_xgboost_version()
    name, data = lock_script().xgboost_shim(cpu_version)
    path = WHEELS / name
    assert path.is_file() and path.read_bytes() == data, "rerun deploy/docker/lock"
    info = f"xgboost-{cpu_version}+cpu.dist-info"
    with zipfile.ZipFile(path) as archive:
        assert sorted(archive.namelist()) == [f"{info}/METADATA", f"{info}/RECORD", f"{info}/WHEEL"]
        metadata = Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        record = [line.split(",") for line in archive.read(f"{info}/RECORD").decode().splitlines()]
        for file, digest, size in record:
            if file != f"{info}/RECORD":
                content = archive.read(file)
                expected = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
                assert (digest, size) == (f"sha256={expected}", str(len(content))), file
    assert (metadata["Name"], metadata["Version"]) == ("xgboost", f"{cpu_version}+cpu")
    assert metadata.get_all("Requires-Dist") == [f"xgboost-cpu=={cpu_version}"]


def test_pip_takes_the_metadata_only_xgboost_for_the_farms_requirement(tmp_path):
    """pip itself (no index, no configuration) resolves pyproject.toml's xgboost requirement to
    the wheel in deploy/docker/wheels, which asks for xgboost-cpu: `pip check` in the image
    finds the farm's requirement met."""
    import json

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    [requirement] = [r for r in project()["project"]["dependencies"]
                     if canonicalize_name(Requirement(r).name) == "xgboost"]
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--isolated", "install", "--quiet", "--dry-run", "--ignore-installed",
         "--no-index", "--no-deps", "--find-links", str(WHEELS), "--report", str(report), requirement],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    [installed] = json.loads(report.read_text())["install"]
    cpu_version = cpu_xgboost_version()
    assert (installed["metadata"]["name"], installed["metadata"]["version"]) == ("xgboost", f"{cpu_version}+cpu")
    assert installed["metadata"]["requires_dist"] == [f"xgboost-cpu=={cpu_version}"]


def locked_closure(pins: dict[str, tuple[str, str]], requirements: list[str]) -> tuple[set[str], bool]:
    """The names ``requirements`` (the image's) need, read from the metadata of the packages this venv
    installed at the locked versions; and whether that reached every package (a package this
    venv has at another version than the lock's has metadata the test cannot read offline)."""
    import importlib.metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    needed: set[str] = set()
    complete = True
    pending = [Requirement(text) for text in requirements]
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        extras = requirement.extras or {""}
        if name in needed and not requirement.extras:
            continue
        needed.add(name)
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            complete = False
            continue
        if name not in pins or dist.version != pins[name][0]:
            complete = False
            continue
        for text in dist.requires or []:
            dependency = Requirement(text)
            if dependency.marker is None or any(dependency.marker.evaluate({"extra": e}) for e in extras):
                pending.append(dependency)
    return needed, complete


# glibc of each base image's distribution: what manylinux wheels it takes.
BASE_GLIBC = {"bookworm": (2, 36), "ubuntu22.04": (2, 35), "ubuntu24.04": (2, 39)}


def image_tags(python: str, base: str) -> set:
    """The wheel tags the image's interpreter accepts (CPython X.Y on x86_64 Linux with the base's glibc)."""
    from packaging import tags

    [glibc] = [v for distro, v in BASE_GLIBC.items() if distro in base]
    platforms = [f"manylinux_{glibc[0]}_{minor}_x86_64" for minor in range(glibc[1], 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]
    version = tuple(int(part) for part in python.split("."))
    return set(tags.cpython_tags(version, platforms=platforms)) | set(
        tags.compatible_tags(version, f"cp{python.replace('.', '')}", platforms=platforms))


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_image_python_fits_requires_python_and_the_locked_wheels(kind):
    from packaging.specifiers import SpecifierSet
    from packaging.utils import parse_wheel_filename

    commands = parse_dockerfile(DOCKERFILES[kind])
    python = image_python(commands)
    base = next(c for c in commands if c.cmd == "FROM").value[0]
    if base.startswith("python:"):
        assert base.split(":")[1].startswith(f"{python}-"), f"{base} is not Python {python}"
    else:
        installs = " ".join(c.value[0] for c in commands if c.cmd == "RUN" and "apt-get install" in c.value[0])
        assert re.search(rf"(?<![\w.-])python{re.escape(python)}-venv(?![\w.-])", installs), installs
    requires = SpecifierSet(project()["project"]["requires-python"])
    assert requires.contains(f"{python}.0"), f"the image's Python {python} is outside requires-python {requires}"
    locked_for, pins = read_lock(lock_path(python))
    assert locked_for == python
    accepted = image_tags(python, base)
    unfit = sorted(wheel for _, wheel in pins.values() if not parse_wheel_filename(wheel)[3] & accepted)
    assert not unfit, f"wheels of the lock that Python {python} on {base} cannot install: {unfit}"


def test_wheel_check_rejects_a_wheel_of_another_python():
    from packaging.utils import parse_wheel_filename

    accepted = image_tags("3.12", "nvidia/cuda:13.0.1-runtime-ubuntu24.04")
    fits = "apache_tvm_ffi-0.1.14.post1-cp312-cp312-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl"
    assert parse_wheel_filename(fits)[3] & accepted
    for wheel in ("apache_tvm_ffi-0.1.14.post1-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
                  "numpy-2.4.6-cp312-cp312-manylinux_2_41_x86_64.whl", "numpy-2.4.6-cp312-cp312-macosx_14_0_arm64.whl"):
        assert not parse_wheel_filename(wheel)[3] & accepted, wheel


