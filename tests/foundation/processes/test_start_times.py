"""A process's start time as every farm process of a boot reads it, whatever the wall clock did since:
real processes; the clock's step is psutil's reading of the boot time moved (a test cannot step the
box's clock under the other tests)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest

from foundation.processes import start_times
from foundation.processes.start_times import boot_epoch, process_start_time

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads Linux's /proc")


@pytest.fixture
def fresh_epoch():
    """This process reads the boot's epoch anew (it is read once per process)."""
    boot_epoch.cache_clear()
    yield
    boot_epoch.cache_clear()


def test_another_process_reads_the_same_start_of_a_process_as_it_does(fresh_epoch):
    mine = process_start_time(os.getpid())
    assert mine is not None and abs(mine - psutil.Process().create_time()) < 60
    script = ("import json; from foundation.processes.start_times import process_start_time as t; "
              f"print(json.dumps(t({os.getpid()})))")
    other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(other.stdout) == mine


def test_a_step_of_the_clock_does_not_move_a_start_time(fresh_epoch, monkeypatch):
    from psutil import _pslinux

    before = process_start_time(os.getpid())
    # psutil's start comes from the boot time the kernel gives now, which a VM's drifting clock moves
    # away from the epoch this boot's first process kept: its move is measured against its own reading.
    psutil_before = psutil.Process().create_time()
    boot_epoch.cache_clear()
    # The kernel's boot time is now-minus-uptime: a clock stepped 90 s forward moves it by 90 s.
    stepped = psutil.boot_time() + 90.0
    monkeypatch.setattr(psutil, "boot_time", lambda: stepped)
    monkeypatch.setattr(_pslinux, "boot_time", lambda: stepped)
    assert psutil.Process().create_time() == pytest.approx(psutil_before + 90.0, abs=5)  # psutil's start moved
    assert process_start_time(os.getpid()) == before


def test_the_first_process_of_a_boot_keeps_the_epoch_the_rest_read_it(tmp_path, monkeypatch, fresh_epoch):
    monkeypatch.setattr(start_times, "_SHARED_MEMORY", tmp_path)
    boot_id = start_times._BOOT_ID.read_text().strip()
    monkeypatch.setattr(psutil, "boot_time", lambda: 1000.5)
    assert boot_epoch() == 1000.5
    assert (tmp_path / f"tvm-farm-boot-{boot_id}").read_text() == "1000.5"
    assert [p.name for p in tmp_path.iterdir()] == [f"tvm-farm-boot-{boot_id}"]  # nothing staged is left
    boot_epoch.cache_clear()
    monkeypatch.setattr(psutil, "boot_time", lambda: 2000.0)
    assert boot_epoch() == 1000.5


def test_a_killed_process_has_no_start_time():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    assert process_start_time(proc.pid) is not None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert process_start_time(proc.pid) is None
