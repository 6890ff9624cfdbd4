"""deploy/docker: the Dockerfiles parsed by BuildKit's own parser (the `dockerfile` package); what
they COPY exists in the build context that /.dockerignore leaves (docker-py's implementation of it).
"""

from __future__ import annotations

import fnmatch
import os
import re
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
    """What `pip install -e .` of the checkout needs: the project files and every file under
    the top-level packages pyproject.toml's packages.find includes (modules and package data)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    required = {"pyproject.toml", "scripts/setup", project["project"]["readme"]}
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


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_dockerfile_installs_the_readme_way(kind):
    commands = parse_dockerfile(DOCKERFILES[kind])
    assert {c.cmd for c in commands} <= DOCKERFILE_INSTRUCTIONS, [c.cmd for c in commands]
    froms = [c for c in commands if c.cmd == "FROM"]
    assert len(froms) == 1 and commands[0].cmd == "FROM"
    base = froms[0].value[0]
    if kind == "cpu":
        assert base == "python:3.11-slim-bookworm"
    else:
        assert re.fullmatch(r"nvidia/cuda:12\.\d+(\.\d+)?-runtime-ubuntu22\.04", base), base
    runs = [c.value[0] for c in commands if c.cmd == "RUN"]
    installs = " ".join(r for r in runs if "apt-get install" in r)
    compiler = r"(?<![\w.-])(g\+\+|gcc|build-essential)(?![\w.-])"
    assert re.search(compiler, installs), "TVM links with the system's C compiler"
    if kind == "cuda":
        assert re.search(r"\bpython3\.11\b", installs) and "python3.11-venv" in installs
        assert re.search(r"\bcuda-nvcc-\d", installs), "CUDA agents compile their candidates"

    # scripts/setup runs in the WORKDIR the checkout was copied to, after the copy; its .venv
    # (beside the checkout) provides the entrypoint.
    setup_index = next(i for i, c in enumerate(commands)
                       if c.cmd == "RUN" and re.search(r"(?<![\w./-])scripts/setup(?![\w./-])", c.value[0]))
    setup_run = commands[setup_index].value[0]
    if kind == "cuda":
        assert "PYTHON=python3.11" in setup_run
    workdir = [c.value[0] for c in commands[:setup_index] if c.cmd == "WORKDIR"][-1]
    copies = [c for c in commands[:setup_index] if c.cmd in ("COPY", "ADD")]
    assert copies and all(c.value[-1] in (".", "./", workdir, workdir + "/") for c in copies)
    entrypoint = next(c for c in commands if c.cmd == "ENTRYPOINT")
    assert entrypoint.json and list(entrypoint.value) == [f"{workdir}/.venv/bin/farm"]

    # Not root, and the user the compose secret and the Kubernetes securityContext expect.
    user = [c.value[0] for c in commands if c.cmd == "USER"][-1]
    assert user not in ("root", "0")
    assert any(re.search(rf"useradd\b.*--uid 10001\b.*\b{re.escape(user)}\s*$", r, re.S) for r in runs)
    env = {}
    for c in commands:
        if c.cmd == "ENV":
            env.update(dict(zip(c.value[::2], c.value[1::2], strict=True)))
    assert set(env) <= COORDINATOR_ENV | AGENT_ENV | OTHER_ENV, set(env)
    assert env["PATH"].startswith(f"{workdir}/.venv/bin:")
    if kind == "cuda":
        assert env["TVM_CUDA_COMPILE_MODE"] == "nvcc"


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
