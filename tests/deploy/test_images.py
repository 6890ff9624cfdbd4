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
from pathlib import Path

import pytest

from support.deploy_recipes import (
    AGENT_ENV,
    COORDINATOR_ENV,
    DOCKERFILES,
    OTHER_ENV,
    ROOT,
    WHEELS,
    dockerfile_env,
    image_python,
    local_wheels,
    lock_path,
    parse_dockerfile,
    read_lock,
)

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
