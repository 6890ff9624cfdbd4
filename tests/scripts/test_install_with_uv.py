"""scripts/install_with_uv: pip's settings here become uv's arguments and environment, and a
setting uv would not honour the same way leaves the install to pip before anything is installed."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install_with_uv"


@pytest.fixture(scope="module")
def install_with_uv():
    loader = importlib.machinery.SourceFileLoader("install_with_uv", str(SCRIPT))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def test_pip_reads_global_then_its_command_then_the_environment(install_with_uv):
    listed = "\n".join([
        "global.find-links='/opt/wheels'",
        "global.extra-index-url='file:///a/simple file:///b/simple'",
        "install.find-links='/srv/install-wheels'",
        ":env:.find-links='/from/env'",
        "download.index-url='https://other.example/simple'",  # another command's: not the install's
        "global.cert='/etc/ssl/certs/ca-certificates.crt'",
    ])
    assert install_with_uv.settings(listed) == {
        "find-links": "/from/env",
        "extra-index-url": "file:///a/simple file:///b/simple",
        "cert": "/etc/ssl/certs/ca-certificates.crt",
    }


def test_settings_become_uv_arguments_and_environment(install_with_uv):
    arguments, environment = install_with_uv.uv_command({
        "extra-index-url": "file:///a/simple\nfile:///b/simple",  # a list over lines in pip.conf
        "find-links": "/opt/wheels",
        "constraint": "/etc/xdg/pip/constraints.txt",
        "index-url": "https://mirror.example/simple",
        "cert": "/etc/ssl/certs/ca-certificates.crt",
        "default-timeout": "180",
        "no-index": "1",
        "disable-pip-version-check": "1",
    })
    assert arguments == ["--constraint", "/etc/xdg/pip/constraints.txt",
                         "--extra-index-url", "file:///a/simple", "--extra-index-url", "file:///b/simple",
                         "--find-links", "/opt/wheels", "--index-url", "https://mirror.example/simple", "--no-index"]
    assert environment == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", "UV_HTTP_TIMEOUT": "180"}
    assert install_with_uv.uv_command({"no-index": "false"}) == ([], {})


@pytest.mark.parametrize("setting", ["trusted-host", "proxy", "require-hashes", "only-binary"])
def test_a_setting_uv_would_not_honour_is_named(install_with_uv, setting):
    with pytest.raises(KeyError, match=setting):
        install_with_uv.uv_command({setting: "x", "find-links": "/opt/wheels"})


def test_such_a_setting_leaves_the_install_to_pip_with_exit_3_and_nothing_installed(tmp_path):
    config = tmp_path / "pip.conf"
    config.write_text("[global]\ntrusted-host = mirror.example\n")
    before = set(Path(sys.prefix).glob("lib/python*/site-packages/*"))
    run = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "six"], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PIP_CONFIG_FILE": str(config)})
    assert run.returncode == 3, run
    assert run.stderr.strip() == ("install_with_uv: pip's setting 'trusted-host' has no uv counterpart here; "
                                  "pip installs"), run.stderr
    assert set(Path(sys.prefix).glob("lib/python*/site-packages/*")) == before
