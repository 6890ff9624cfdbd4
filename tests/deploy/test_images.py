"""deploy/docker: the Dockerfiles parsed by BuildKit's own parser (the `dockerfile` package): they
install their lock of runtime dependencies (no test tool) before copying the source, on a Python
that requires-python and every locked wheel accept; the CUDA image is on the CUDA major the
installed TVM wheel's libtvm_runtime_cuda.so needs (`readelf -d`); what they COPY exists in the
build context that /.dockerignore leaves (docker-py's implementation of it).
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.deploy_recipes import AGENT_ENV, COORDINATOR_ENV, DOCKERFILES, OTHER_ENV, ROOT

DOCKERFILE_INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
                           "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "MAINTAINER"}


def dockerignore_patterns() -> list[str]:
    path = ROOT / ".dockerignore"
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def build_context(patterns: list[str]) -> set[str]:
    """Paths (relative, '/'-separated) the build context keeps, as Docker applies .dockerignore."""
    from docker.utils.build import exclude_paths

    return set(exclude_paths(str(ROOT), patterns))


def required_context_files() -> set[str]:
    """What the images install from the checkout: their locks and the wheels they name that the
    index lacks, the project files and every file under the top-level packages pyproject.toml's
    packages.find includes (modules and package data)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    required = {"pyproject.toml", project["project"]["readme"]}
    locks = (ROOT / "deploy" / "docker").glob("requirements-py*.txt")
    required |= {path.relative_to(ROOT).as_posix() for path in locks}
    required |= {path.relative_to(ROOT).as_posix() for path in (ROOT / "deploy" / "docker" / "wheels").glob("*.whl")}
    tops = [path for path in ROOT.iterdir() if (path / "__init__.py").is_file()
            and any(fnmatch.fnmatchcase(path.name, pattern) for pattern in include)]
    assert tops, f"no package matches {include}"
    for top in tops:
        for folder, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
            required |= {(Path(folder) / f).relative_to(ROOT).as_posix() for f in files
                         if not f.endswith((".pyc", ".so"))}
    return required


def context_problems(patterns: list[str]) -> list[str]:
    context = build_context(patterns)
    problems = [f"{path} is left out of the build context" for path in sorted(required_context_files() - context)]
    for path in context:
        parts = path.split("/")
        if parts[0] in (".git", ".venv") or "__pycache__" in parts or path.endswith(".pyc"):
            problems.append(f"{path} is in the build context")
    return problems


def parse_dockerfile(path: Path):
    import dockerfile

    return dockerfile.parse_file(str(path))


def dockerfile_env(commands) -> dict[str, str]:
    env = {}
    for c in commands:
        if c.cmd == "ENV":
            env.update(dict(zip(c.value[::2], c.value[1::2], strict=True)))
    return env


def image_python(commands) -> str:
    """The X.Y of the Python the image's venv is made with (`pythonX.Y -m venv`)."""
    runs = " ".join(c.value[0] for c in commands if c.cmd == "RUN")
    [version] = set(re.findall(r"\bpython(3\.\d+) -m venv\b", runs))
    return version


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_dockerfile_installs_locked_runtime_dependencies_before_the_source(kind):
    check_image_installs(parse_dockerfile(DOCKERFILES[kind]), kind)


def check_image_installs(commands, kind: str) -> None:
    assert {c.cmd for c in commands} <= DOCKERFILE_INSTRUCTIONS, [c.cmd for c in commands]
    froms = [c for c in commands if c.cmd == "FROM"]
    assert len(froms) == 1 and commands[0].cmd == "FROM"
    runs = [c.value[0] for c in commands if c.cmd == "RUN"]
    installs = " ".join(r for r in runs if "apt-get install" in r)
    compiler = r"(?<![\w.-])(g\+\+|gcc|build-essential)(?![\w.-])"
    assert re.search(compiler, installs), "TVM links with the system's C compiler"
    if kind == "cuda":
        assert re.search(r"\bcuda-nvcc-\d", installs), "CUDA agents compile their candidates"

    # The lock of the image's Python is copied alone and installed, then the source is copied
    # and the farm installed without dependencies: a source change reuses the dependencies' layer.
    python = image_python(commands)
    lock = lock_path(python)
    source_copy = next(i for i, c in enumerate(commands) if c.cmd == "COPY" and list(c.value[:-1]) == ["."])
    before, after = commands[:source_copy], commands[source_copy + 1:]
    # Besides the lock, only the folder of the wheels it names that the index lacks (the
    # metadata-only xgboost), each copied to the same relative path that pip is given.
    wheels = WHEELS.relative_to(ROOT).as_posix()
    inputs = [str(lock.relative_to(ROOT))] + ([wheels] if local_wheels(read_lock(lock)[1]) else [])
    lock_copies = [c for c in before if c.cmd in ("COPY", "ADD")]
    assert sorted(list(c.value[:-1]) for c in lock_copies) == sorted([i] for i in inputs), \
        f"only the lock is copied before the dependencies are installed (and {wheels}, which it needs)"
    assert all(c.value[-1].rstrip("/") == c.value[0].rstrip("/") for c in lock_copies), \
        "the lock and its wheels are copied to the paths pip is given"
    pip_before = [r for r in (c.value[0] for c in before if c.cmd == "RUN") if "pip install" in r]
    lock_option = rf"pip install\b.*\s-r {re.escape(str(lock.relative_to(ROOT)))}(\s|$)"
    assert any(re.search(lock_option, r) for r in pip_before), \
        f"the dependencies are installed from {lock.name} before `COPY . .`"
    # Hash-checking mode: nothing the lock does not name, no file but one it hashes.
    assert all("--require-hashes" in r.split() for r in pip_before if re.search(lock_option, r)), \
        f"{lock.name} is installed with --require-hashes"
    if wheels in inputs:
        lock_file = re.escape(str(lock.relative_to(ROOT)))
        find_links = rf"pip install\b.*\s--find-links[ =]{re.escape(wheels)}/?\s.*-r {lock_file}(\s|$)"
        assert any(re.search(find_links, r) for r in pip_before), \
            f"{lock.name} names wheels of {wheels}: pip installs it with --find-links {wheels}"
    pip_after = [r for r in (c.value[0] for c in after if c.cmd == "RUN") if "pip install" in r]
    assert pip_after and all(re.search(r"pip install\b.*--no-deps \.(\s|$)", r) for r in pip_after), \
        "after `COPY . .` only the farm itself is installed, without dependencies"
    # --no-deps checks nothing: `pip check` fails the build where what is installed does not meet
    # the farm's requirements (say, its xgboost) or those of a locked package.
    assert any(re.search(r"pip install\b.*--no-deps \.\s.*&&\s*\S*pip check\b", r) for r in pip_after), \
        "`pip check` follows the farm's install"
    workdir = [c.value[0] for c in before if c.cmd == "WORKDIR"][-1]
    assert commands[source_copy].value[-1] in (".", "./", workdir, workdir + "/")

    # Nothing of the test suite: no scripts/setup (it installs the test extra), and pip is
    # given the lock and the checkout, no package by name, no extra.
    every_run = " ".join(runs)
    assert not re.search(r"(?<![\w./-])scripts/setup(?![\w./-])", every_run), "scripts/setup installs the test extra"
    assert pip_install_targets(runs) == {".", f"-r {lock.relative_to(ROOT)}"}

    entrypoint = next(c for c in commands if c.cmd == "ENTRYPOINT")
    assert entrypoint.json and list(entrypoint.value) == [f"{workdir}/.venv/bin/farm"]
    # Not root, and the user the compose secret and the Kubernetes securityContext expect.
    user = [c.value[0] for c in commands if c.cmd == "USER"][-1]
    assert user not in ("root", "0")
    assert any(re.search(rf"useradd\b.*--uid 10001\b.*\b{re.escape(user)}\s*$", r, re.S) for r in runs)
    env = dockerfile_env(commands)
    assert set(env) <= COORDINATOR_ENV | AGENT_ENV | OTHER_ENV, set(env)
    assert env["PATH"].startswith(f"{workdir}/.venv/bin:")
    if kind == "cuda":
        assert env["TVM_CUDA_COMPILE_MODE"] == "nvcc"


def pip_install_targets(runs: list[str]) -> set[str]:
    """What `pip install` is asked to install in the RUN commands: requirement files (`-r F`),
    paths and package names; options and their values (`--no-deps`, `-c F`) left out."""
    targets = set()
    for run in runs:
        for command in re.split(r"&&|;|\|\|", run):
            words = command.split()
            if "pip" not in " ".join(words[:3]) or "install" not in words:
                continue
            words = words[words.index("install") + 1:]
            while words:
                word = words.pop(0)
                if word in ("-r", "--requirement"):
                    targets.add(f"-r {words.pop(0)}")
                elif word in ("-c", "--constraint", "-e", "--editable", "-i", "--index-url", "-f", "--find-links"):
                    targets.add(f"{word} {words.pop(0)}") if word in ("-e", "--editable") else words.pop(0)
                elif not word.startswith("-"):
                    targets.add(word)
    return targets


def test_dockerfile_check_rejects_an_image_without_the_metadata_only_xgboost(tmp_path):
    """Without the wheels folder, without --find-links (pip finds no xgboost==V+cpu), with the
    whole of deploy/docker copied first, or without `pip check` after the farm's install."""
    text = DOCKERFILES["cpu"].read_text()
    breakages = {
        "no wheels": text.replace("COPY deploy/docker/wheels deploy/docker/wheels\n", ""),
        "no --find-links": text.replace("--find-links deploy/docker/wheels ", ""),
        "deploy/docker whole": text.replace("COPY deploy/docker/wheels deploy/docker/wheels",
                                            "COPY deploy/docker deploy/docker"),
        "no pip check": text.replace(" \\\n && .venv/bin/pip check --disable-pip-version-check", ""),
    }
    for name, broken_text in breakages.items():
        assert broken_text != text, name
        broken = tmp_path / re.sub(r"\W+", "-", name)
        broken.write_text(broken_text)
        with pytest.raises(AssertionError):
            check_image_installs(parse_dockerfile(broken), "cpu")


def test_pip_install_targets_name_what_is_installed():
    assert pip_install_targets([
        "python3.11 -m venv .venv && .venv/bin/pip install --no-cache-dir -r a.txt -c c.txt",
        ".venv/bin/pip install --no-deps . && rm -rf build",
        "pip install -e '.[test]' pytest",
    ]) == {"-r a.txt", ".", "-e '.[test]'", "pytest"}


def test_dockerfile_check_rejects_an_image_with_the_test_suite(tmp_path):
    """The Dockerfile as it was: the checkout copied first, then scripts/setup (the test extra)."""
    text = DOCKERFILES["cpu"].read_text()
    start, end = text.index("COPY deploy/docker/requirements-py311.txt"), text.index("ENV PATH=")
    broken = tmp_path / "Dockerfile"
    broken.write_text(text[:start] + "COPY . .\nRUN python3.11 -m venv .venv && PYTHON=python3.11 bash scripts/setup\n"
                      + text[end:])
    with pytest.raises(AssertionError):
        check_image_installs(parse_dockerfile(broken), "cpu")


# --------------------------------------------------------------------------- the images' locks
WHEELS = ROOT / "deploy" / "docker" / "wheels"


def lock_path(python: str) -> Path:
    return ROOT / "deploy" / "docker" / f"requirements-py{python.replace('.', '')}.txt"


def every_lock() -> list[Path]:
    return sorted((ROOT / "deploy" / "docker").glob("requirements-py*.txt"))


def local_wheels(pins: dict[str, tuple[str, str]]) -> set[str]:
    """The wheels a lock names that deploy/docker/wheels holds: the index has not got them."""
    return {wheel for _, wheel in pins.values() if (WHEELS / wheel).is_file()}


def lock_extras(path: Path) -> tuple[str, ...]:
    """The farm's extras the lock holds besides its dependencies (its `# extras` line)."""
    [extras] = re.findall(r"^# extras (\S+)$", path.read_text(), re.M)
    return () if extras == "none" else tuple(extras.split(","))


def image_requirements(path: Path) -> list[str]:
    """What the lock at ``path`` must hold: pyproject.toml's dependencies and its extras'."""
    optional = project()["project"]["optional-dependencies"]
    return project()["project"]["dependencies"] + [r for e in lock_extras(path) for r in optional[e]]


# A lock's line: the pin, the sha256 of each wheel of it the image's Python could take, the
# wheel pip chose (deploy/docker/lock writes them so).
LOCK_LINE = re.compile(r"([A-Za-z0-9._-]+)==(\S+)((?: --hash=sha256:[0-9a-f]{64})+)  # (\S+\.whl)")


def read_lock(path: Path) -> tuple[str, dict[str, tuple[str, str]]]:
    """(the Python it was resolved for, {normalized name: (version, wheel file)})."""
    from packaging.utils import canonicalize_name

    text = path.read_text()
    [python] = re.findall(r"^# python (3\.\d+)$", text, re.M)
    pins = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = LOCK_LINE.fullmatch(line)
            assert match, f"{path.name}: not `name==version --hash=sha256:H...  # wheel`: {line!r}"
            pins[canonicalize_name(match[1])] = (match[2], match[4])
    return python, pins


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


# --------------------------------------------------------------------------- the CUDA major
def wheel_cudart_major() -> int | None:
    """The CUDA major the installed TVM wheel's CUDA runtime library needs (its libcudart soname);
    None without readelf. Read when the tests are collected, so the test's id names it."""
    import importlib.util

    if shutil.which("readelf") is None:
        return None
    [package] = importlib.util.find_spec("tvm").submodule_search_locations
    library = Path(package) / "lib" / "libtvm_runtime_cuda.so"
    assert library.is_file(), f"the TVM wheel has no {library.name}"
    dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    [major] = re.findall(r"\(NEEDED\)\s+Shared library: \[libcudart\.so\.(\d+)\]", dynamic)
    return int(major)


def cuda_image_problems(commands, needed_major: int) -> list[str]:
    """Where the CUDA image's base and toolkit packages disagree with the wheel's CUDA major."""
    base = next(c for c in commands if c.cmd == "FROM").value[0]
    match = re.fullmatch(r"nvidia/cuda:(\d+)\.(\d+)\.\d+-(?:base|runtime|devel)-ubuntu\d+\.\d+", base)
    if not match:
        return [f"{base} is not an nvidia/cuda image"]
    major, minor = int(match[1]), int(match[2])
    problems = [] if major == needed_major else [
        f"{base} is CUDA {major}, the TVM wheel needs libcudart.so.{needed_major}"]
    installs = " ".join(c.value[0] for c in commands if c.cmd == "RUN" and "apt-get install" in c.value[0])
    packages = re.findall(r"(?<![\w.-])(cuda-[a-z-]+?)-(\d+)-(\d+)(?![\w.-])", installs)
    if not any(name == "cuda-nvcc" for name, _, _ in packages):
        problems.append("no cuda-nvcc-M-m package: agents compile their CUDA candidates")
    problems += [f"{name}-{pmajor}-{pminor} is not the base image's CUDA {major}.{minor}"
                 for name, pmajor, pminor in packages if (int(pmajor), int(pminor)) != (major, minor)]
    return problems


def wheel_cudart_param():
    major = wheel_cudart_major()
    if major is None:
        return pytest.param(None, id="no-readelf", marks=pytest.mark.skip(
            reason="readelf is not installed (Debian package binutils, which g++ brings)"))
    return pytest.param(major, id=f"libcudart.so.{major}")


@pytest.mark.parametrize("major", [wheel_cudart_param()])
def test_cuda_image_is_on_the_cuda_major_the_wheel_needs(major):
    problems = cuda_image_problems(parse_dockerfile(DOCKERFILES["cuda"]), major)
    assert not problems, f"the TVM wheel needs CUDA {major} (libcudart.so.{major}): {problems}"


def test_cuda_image_check_rejects_another_major(tmp_path):
    """The image as it was (CUDA 12.4 for a wheel built with 13), and a toolkit of another release."""
    text = DOCKERFILES["cuda"].read_text()
    old = tmp_path / "Dockerfile.cuda"
    old.write_text(re.sub(r"cuda-(nvcc|cudart-dev)-\d+-\d+", r"cuda-\1-12-4",
                          re.sub(r"FROM nvidia/cuda:\S+", "FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04", text)))
    assert cuda_image_problems(parse_dockerfile(old), 13) == [
        "nvidia/cuda:12.4.1-runtime-ubuntu22.04 is CUDA 12, the TVM wheel needs libcudart.so.13"]
    mixed = tmp_path / "Dockerfile.mixed"
    mixed.write_text(re.sub(r"cuda-nvcc-\d+-\d+", "cuda-nvcc-12-4", text))
    base_release = ".".join(re.search(r"FROM nvidia/cuda:(\d+)\.(\d+)", text).groups())
    assert cuda_image_problems(parse_dockerfile(mixed), 13) == [
        f"cuda-nvcc-12-4 is not the base image's CUDA {base_release}"]


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_dockerfile_copies_exist_in_the_build_context(kind):
    context = build_context(dockerignore_patterns())
    for command in parse_dockerfile(DOCKERFILES[kind]):
        if command.cmd not in ("COPY", "ADD") or any(f.startswith("--from") for f in command.flags):
            continue
        for source in command.value[:-1]:
            if source in (".", "./"):
                assert context, "empty build context"
                continue
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
            assert source.rstrip("/") in context, f"COPY {source}: excluded by .dockerignore"


def test_build_context_holds_the_package_and_no_environment():
    assert context_problems(dockerignore_patterns()) == []


def test_build_context_check_rejects_broken_ignore_files():
    """One .dockerignore that drops a package, one that lets .venv in."""
    assert context_problems(dockerignore_patterns() + ["agent"])
    assert context_problems([p for p in dockerignore_patterns() if p not in (".venv", "**/.venv")])
