"""Small offline bundles for the tests of scripts/bundle, scripts/setup --offline and bench/gpu_run.sh."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

THIS_PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"


def write_manifest(bundle: Path, install: str, python: str = THIS_PYTHON) -> dict:
    """The manifest scripts/bundle writes, for the files in ``bundle``."""
    files = [{"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "size": path.stat().st_size}
             for path in sorted(bundle.iterdir()) if path.name != "manifest.json"]
    manifest = {"format": 1, "python": python, "platforms": ["manylinux_2_28_x86_64"], "install": install,
                "substituted": {}, "files": files, "total_size": sum(f["size"] for f in files)}
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def tiny_wheel_bundle(root: Path) -> Path:
    """A real bundle of one pure wheel, `farmprobe` 1.0, whose module says hello: small enough to
    install offline in seconds."""
    source = root / "farmprobe-source"
    source.mkdir(parents=True)
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "farmprobe"\nversion = "1.0"\n[tool.setuptools]\npy-modules = ["farmprobe"]\n')
    (source / "farmprobe.py").write_text('HELLO = "installed offline"\n')
    bundle = root / "bundle"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(bundle), str(source)], check=True, capture_output=True, timeout=120)
    write_manifest(bundle, "farmprobe==1.0")
    return bundle


def offline_env(venv: Path) -> dict:
    """scripts/setup's environment with pip cut off from every index: no index, a proxy nothing
    listens on, and none of this box's pip configuration (its find-links and extra indexes).

    pip installs without byte-compiling what it installs: compiling is pip's step, not the
    bundle's, and TVM's, NumPy's and the rest's files were 8 of the whole-bundle test's 47 CPU-s.
    PIP_NO_COMPILE=0 is how pip reads `--no-compile` from the
    environment (an option that stores False takes the variable's value as the option's)."""
    dead_proxy = "http://127.0.0.1:9"
    return {"VENV": str(venv), "PYTHON": sys.executable, "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull,
            "PIP_FIND_LINKS": "", "PIP_PROXY": dead_proxy, "http_proxy": dead_proxy, "https_proxy": dead_proxy,
            "HTTP_PROXY": dead_proxy, "HTTPS_PROXY": dead_proxy, "PIP_DEFAULT_TIMEOUT": "5", "PIP_NO_COMPILE": "0"}
