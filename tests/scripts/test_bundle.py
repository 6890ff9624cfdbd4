"""scripts/bundle writes an offline wheelhouse with a manifest; scripts/setup --offline verifies it, then
installs from it alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name, parse_wheel_filename

from support.bundles import THIS_PYTHON, offline_env, tiny_wheel_bundle, write_manifest

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "scripts" / "bundle"
SETUP = REPO / "scripts" / "setup"


def run(*command: str | Path, env: dict | None = None, timeout: float = 60,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def one_error_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def bundle_script():
    """scripts/bundle, imported (it has no .py suffix)."""
    from importlib.machinery import SourceFileLoader
    from importlib.util import module_from_spec, spec_from_loader

    loader = SourceFileLoader("scripts_bundle", str(BUNDLE))
    module = module_from_spec(spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def locked_versions(lock: Path) -> dict[str, str]:
    """{normalized name: version} of an image lock (deploy/docker/requirements-pyXY.txt)."""
    pins = (line.split()[0].split("==") for line in lock.read_text().splitlines() if line and not line.startswith("#"))
    return {canonicalize_name(name): version for name, version in pins}


@pytest.fixture
def small_bundle(tmp_path) -> Path:
    """Two stand-in files and the manifest scripts/bundle writes for them."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "a-1.0-py3-none-any.whl").write_bytes(b"first wheel" * 100)
    (bundle / "b-2.0-py3-none-any.whl").write_bytes(b"second wheel" * 100)
    write_manifest(bundle, "a==1.0")
    return bundle


def test_verify_accepts_the_bundle_as_written(small_bundle):
    done = run(sys.executable, BUNDLE, "--verify", small_bundle, "--python", THIS_PYTHON)
    assert done.returncode == 0, done.stderr
    assert f"2 files match manifest.json (0.0 MB, Python {THIS_PYTHON})" in done.stdout


def test_setup_offline_refuses_a_tampered_bundle_before_installing(small_bundle, tmp_path):
    wheel = small_bundle / "b-2.0-py3-none-any.whl"
    wheel.write_bytes(wheel.read_bytes()[:-1] + b"X")  # same size, other content
    venv = tmp_path / "venv"
    done = run("bash", SETUP, "--offline", small_bundle, env=offline_env(venv))
    assert done.returncode == 2
    assert one_error_line(done) == (
        f"error: bundle {small_bundle}: b-2.0-py3-none-any.whl does not match its manifest's sha256 and size "
        "(the file changed or was cut short; copy the bundle again)")
    assert not venv.exists() and done.stdout == ""


@pytest.mark.parametrize("damage, expected", [
    ("truncate", "b-2.0-py3-none-any.whl does not match its manifest's sha256 and size"),
    ("remove", "lacks b-2.0-py3-none-any.whl, which its manifest lists"),
    ("add", "holds c-3.0-py3-none-any.whl, which its manifest does not list"),
])
def test_verify_names_the_file_that_differs(small_bundle, damage, expected):
    wheel = small_bundle / "b-2.0-py3-none-any.whl"
    if damage == "truncate":
        wheel.write_bytes(wheel.read_bytes()[:10])
    elif damage == "remove":
        wheel.unlink()
    else:
        (small_bundle / "c-3.0-py3-none-any.whl").write_bytes(b"stowaway")
    done = run(sys.executable, BUNDLE, "--verify", small_bundle)
    assert done.returncode == 2
    assert expected in one_error_line(done)


def test_verify_refuses_another_python_and_a_missing_bundle(small_bundle, tmp_path):
    done = run(sys.executable, BUNDLE, "--verify", small_bundle, "--python", "3.99")
    assert done.returncode == 2
    assert one_error_line(done) == (
        f"error: bundle {small_bundle} is for Python {THIS_PYTHON}, not 3.99 "
        f"(install it with Python {THIS_PYTHON}, or write one with --python 3.99)")
    done = run("bash", SETUP, "--offline", tmp_path / "nowhere", env=offline_env(tmp_path / "venv"))
    assert done.returncode == 3
    assert one_error_line(done) == (f"error: no bundle at {tmp_path / 'nowhere'}: manifest.json is missing "
                                    f"(write one with scripts/bundle {tmp_path / 'nowhere'})")


def test_bundle_refuses_bad_arguments_before_fetching(small_bundle):
    done = run(sys.executable, BUNDLE, small_bundle)
    assert done.returncode == 2
    assert one_error_line(done) == (f"error: {small_bundle} is not empty "
                                    "(give a new or empty folder; a bundle is written whole)")
    done = run(sys.executable, BUNDLE, small_bundle.parent / "new", "--python", "2.7")
    assert done.returncode == 2 and "--python '2.7' is not a Python version" in one_error_line(done)
    assert not (small_bundle.parent / "new").exists()


def test_bundle_refuses_an_out_it_cannot_write_and_creates_nothing(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    for out, expected in [
        (a_file, f"error: {a_file} is a file, not a folder (give a new or empty folder for the bundle)"),
        (a_file / "bundle", f"error: cannot write the bundle to {a_file / 'bundle'}: Not a directory "
                            "(give a new or empty folder this user can write)"),
        (Path("/proc/farm-bundle/new"), "error: cannot write the bundle to /proc/farm-bundle/new: "),
    ]:
        done = run(sys.executable, BUNDLE, out)
        assert done.returncode == 2, done.stderr
        assert one_error_line(done).startswith(expected)
    assert sorted(tmp_path.iterdir()) == [a_file] and a_file.read_text() == "not a folder"


@pytest.mark.slow
def test_a_bundle_that_fails_halfway_leaves_out_as_it_was(tmp_path):
    """The farm's wheel is built before pip finds no xgboost for a platform that does not exist:
    neither a new OUT nor an empty one given keeps it."""
    for out in (tmp_path / "new" / "bundle", tmp_path / "empty"):
        if out.name == "empty":
            out.mkdir()
        done = run(sys.executable, BUNDLE, out, "--platform", "no_such_platform", timeout=600)
        assert done.returncode == 4, done.stderr
        assert done.stderr.splitlines()[-1].startswith("error: pip could not download xgboost-cpu")
    assert [path.name for path in tmp_path.iterdir()] == ["empty"] and not any((tmp_path / "empty").iterdir())


@pytest.mark.parametrize("damage, expected", [
    (lambda m: m.pop("python"), "python is missing or not a string"),
    (lambda m: m.pop("install"), "install is missing or not a string"),
    (lambda m: m.pop("total_size"), "total_size is missing or not an integer"),
    (lambda m: m["files"][1].pop("size"), "files[1].size is missing or not an integer"),
    (lambda m: m["files"][0].update(file="../a-1.0-py3-none-any.whl"),
     "files[0].file '../a-1.0-py3-none-any.whl' is not a file name"),
    (lambda m: m.update(files="all of them"), "files is missing or not a list"),
], ids=["python", "install", "total_size", "size", "file", "files"])
def test_verify_and_setup_refuse_a_manifest_missing_a_key(small_bundle, tmp_path, damage, expected):
    manifest = json.loads((small_bundle / "manifest.json").read_text())
    damage(manifest)
    (small_bundle / "manifest.json").write_text(json.dumps(manifest))
    line = (f"error: {small_bundle / 'manifest.json'} is not a bundle manifest ({expected}; "
            "write the bundle again)")
    done = run(sys.executable, BUNDLE, "--verify", small_bundle, "--python", THIS_PYTHON)
    assert done.returncode == 2 and one_error_line(done) == line
    venv = tmp_path / "venv"
    done = run("bash", SETUP, "--offline", small_bundle, env=offline_env(venv))
    assert done.returncode == 2 and one_error_line(done) == line
    assert not venv.exists() and done.stdout == ""


def test_the_images_lock_pins_a_bundle_whose_platform_takes_its_wheels():
    """The lock was resolved for glibc 2.28 on x86_64: a bundle for that platform or a newer glibc
    is pinned by it; one for an older glibc, another architecture or a Python with no lock is not."""
    bundle = bundle_script()
    lock = REPO / "deploy" / "docker" / "requirements-py312.txt"
    for platform in ("manylinux_2_28_x86_64", "manylinux_2_34_x86_64"):
        assert bundle.image_lock("3.12", bundle.platform_tags(platform)) == lock, platform
    for python, platform in (("3.12", "manylinux_2_17_x86_64"), ("3.12", "manylinux_2_28_aarch64"),
                             ("3.99", "manylinux_2_28_x86_64")):
        assert bundle.image_lock(python, bundle.platform_tags(platform)) is None, (python, platform)
    assert locked_versions(lock)["apache-tvm"] == "0.27.0.post1"


def test_setup_offline_installs_into_a_venv_without_pip(tmp_path):
    """Where the Python has no ensurepip, the venv has no pip of its own: the Python's pip installs into it."""
    bundle = tiny_wheel_bundle(tmp_path / "made")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    done = run("bash", SETUP, "--offline", bundle, env=offline_env(venv), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"scripts/setup: installed farmprobe==1.0 from {bundle} into {venv}, offline"
    probe = run(venv / "bin" / "python", "-c", "import farmprobe; print(farmprobe.HELLO)", cwd=tmp_path)
    assert probe.stdout.strip() == "installed offline", probe.stderr


def fresh_checkout(root: Path) -> Path:
    """The checkout's files (as scripts/bundle lists them) in a new git repository with no .venv:
    what a user has who cloned the farm and runs scripts/bundle with the Python they have."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True, timeout=60)
    for name in filter(None, listed.stdout.decode().split("\0")):
        if (REPO / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    subprocess.run(["git", "init", "-q", str(root)], check=True, timeout=60)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True, timeout=60)
    return root


@pytest.mark.slow
def test_a_stock_python_builds_the_bundles_own_wheels(tmp_path):
    """Debian's /usr/bin/python3 has setuptools 66, older than the farm's build asks for: the
    wheels scripts/bundle makes itself still build, in pip's isolated build environment
    (which fetches setuptools from the index)."""
    stock = "/usr/bin/python3"
    if not os.access(stock, os.X_OK):
        pytest.skip(f"no distribution Python at {stock}")
    checkout = fresh_checkout(tmp_path / "checkout")
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    out.mkdir()
    scratch.mkdir()
    steps = ("import sys; from pathlib import Path\n"
             "from importlib.machinery import SourceFileLoader\n"
             "bundle = SourceFileLoader('bundle', sys.argv[1]).load_module()\n"
             "out, scratch = Path(sys.argv[2]), Path(sys.argv[3])\n"
             "print(bundle._build_farm_wheel(out, scratch).name)\n"
             "print(bundle._build_xgboost_shim(out, scratch, '3.2.0').name)\n")
    done = run(stock, "-c", steps, checkout / "scripts" / "bundle", out, scratch, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    farm_wheel, shim = done.stdout.split()
    assert farm_wheel.startswith("tvm_farm-0.1.0-") and shim.startswith("xgboost-3.2.0+cpu-")
    assert sorted(path.name for path in out.iterdir()) == sorted([farm_wheel, shim])


@pytest.mark.slow
def test_a_bundle_installs_into_a_fresh_venv_with_pip_offline(tmp_path):
    """About 220 MB of wheels: pip's cache (or FARM_TEST_WHEELHOUSE, a folder of wheels such as an
    earlier bundle) saves downloading them again; building the bundle needs the index or that folder."""
    bundle = tmp_path / "bundle"
    find_links = ["--find-links", os.environ["FARM_TEST_WHEELHOUSE"]] if os.environ.get("FARM_TEST_WHEELHOUSE") else []
    built = run(sys.executable, BUNDLE, bundle, "--python", THIS_PYTHON, *find_links, timeout=900)
    assert built.returncode == 0, built.stderr
    manifest = json.loads((bundle / "manifest.json").read_text())
    names = {entry["file"].split("-")[0] for entry in manifest["files"]}
    assert {"tvm_farm", "apache_tvm", "apache_tvm_ffi", "xgboost_cpu", "xgboost", "numpy"} <= names
    # The CPU-only xgboost and nothing of CUDA's; no test extras unless asked.
    assert not {n for n in names if n.startswith("nvidia")} and "pytest" not in names
    assert manifest["install"] == "tvm-farm==0.1.0"
    assert f"{manifest['total_size'] / 1e6:.1f} MB" in built.stdout
    # The images' lock of this Python pins every version: what the tests ran with, not the index's newest.
    lock = bundle_script().image_lock(THIS_PYTHON, manifest["platforms"])
    assert lock is not None and manifest["pinned_by"] == lock.relative_to(REPO).as_posix()
    assert f"(pinned by {manifest['pinned_by']})" in built.stdout
    bundled = {name: str(version) for name, version, _, _ in
               (parse_wheel_filename(entry["file"]) for entry in manifest["files"])}
    locked = locked_versions(lock)
    # The lock pins the same CPU-only pair (deploy/docker/lock), so every locked version is bundled,
    # but what only the image's postgres extra brings (a bundle without extras has no PostgreSQL driver).
    assert bundled["xgboost-cpu"] == locked["xgboost-cpu"] and bundled["xgboost"] == locked["xgboost-cpu"] + "+cpu"
    extra_only = {"psycopg", "psycopg-binary"}
    assert extra_only <= set(locked), "the image's lock no longer names the postgres extra's driver: update this"
    differ = {name: (version, bundled.get(name)) for name, version in locked.items()
              if name not in extra_only and bundled.get(name) != version}
    assert not differ, differ
    assert not extra_only & set(bundled), "a bundle without extras carries the PostgreSQL driver"

    venv = tmp_path / "venv"
    installed = run("bash", SETUP, "--offline", bundle, env=offline_env(venv), timeout=900)
    assert installed.returncode == 0, installed.stderr
    # Run outside the checkout, whose farm/ would otherwise be imported instead of the venv's.
    probe = run(venv / "bin" / "python", "-c", "import tvm, xgboost, farm.cli.app; "
                "print(tvm.__version__, xgboost.__file__, farm.cli.app.__file__)", env={"PYTHONPATH": ""}, cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr
    version_line, xgboost_file, farm_file = probe.stdout.split()
    assert version_line.startswith("0.27.0") and xgboost_file.startswith(str(venv)) and farm_file.startswith(str(venv))
    version = run(venv / "bin" / "farm", "--version", cwd=tmp_path)
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("farm    0.1.0") and "TVM     0.27.0" in version.stdout
    checked = run(venv / "bin" / "python", "-m", "pip", "check", env=offline_env(venv))
    assert checked.returncode == 0 and "No broken requirements" in checked.stdout, checked.stdout
