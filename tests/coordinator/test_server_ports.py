"""The coordinator's ports through the real `farm coordinator`: a taken port fails the start, clearly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from farm.local_cluster import free_port
from foundation.rpc.tracker import TrackerProcess


def _coordinator(exe: str, home: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "FARM_HOME": str(home)}
    env.pop("FARM_REGISTRY", None)
    return subprocess.Popen([exe, "coordinator", "--json", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _running(proc: subprocess.Popen) -> dict:
    """The document a coordinator prints once it serves."""
    line = proc.stdout.readline()
    assert line, f"the coordinator exited {proc.wait()}: {proc.stderr.read()}"
    document = [line]
    while not line.startswith("}"):
        line = proc.stdout.readline()
        document.append(line)
    return json.loads("".join(document))


def _refused(proc: subprocess.Popen, timeout: float = 120) -> str:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail("the coordinator started instead of refusing")
    assert proc.returncode not in (0, None), (out, err)
    # A daemon logs on stderr as it starts; its refusal is the one error line, last.
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], err
    assert "Traceback" not in err
    return errors[0]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_second_coordinator_on_a_taken_port_fails_at_start(farm_exe, tmp_path):
    port = free_port()
    first = _coordinator(farm_exe, tmp_path / "a", "--listen", f"127.0.0.1:{port}",
                         "--registry", f"sqlite:///{tmp_path / 'a.db'}", "--tracker-listen", "127.0.0.1:0")
    try:
        served = _running(first)
        assert served["listen"] == f"127.0.0.1:{port}"
        second = _coordinator(farm_exe, tmp_path / "b", "--listen", f"127.0.0.1:{port}",
                              "--registry", f"sqlite:///{tmp_path / 'b.db'}", "--tracker-listen", "127.0.0.1:0")
        try:
            line = _refused(second)
        finally:
            _stop(second)  # one that started anyway must not outlive the test
        assert f"cannot listen on 127.0.0.1:{port}" in line and "--listen" in line
        # Nothing of the second was made, and the first still serves its own registry.
        assert not (tmp_path / "b.db").exists()
        jobs = subprocess.run([farm_exe, "jobs", "--coordinator", f"127.0.0.1:{port}", "--json"],
                              capture_output=True, text=True, timeout=60)
        assert jobs.returncode == 0 and json.loads(jobs.stdout) == [], jobs.stderr
        assert first.poll() is None
    finally:
        _stop(first)


def test_a_taken_tracker_port_fails_the_coordinator(farm_exe, tmp_path):
    """Another farm's tracker answers on the port: before, the coordinator logged that its own
    tracker listened (it had died) and used the other farm's."""
    with TrackerProcess("127.0.0.1", 0) as other_farms:
        proc = _coordinator(farm_exe, tmp_path, "--listen", "127.0.0.1:0",
                            "--registry", f"sqlite:///{tmp_path / 'r.db'}",
                            "--tracker-listen", f"127.0.0.1:{other_farms.port}")
        try:
            line = _refused(proc)
        finally:
            _stop(proc)
        assert f"did not start on 127.0.0.1:{other_farms.port}" in line and "taken" in line
        assert "--tracker" in line
        assert other_farms.running


@pytest.mark.parametrize(("flag", "listen", "fix"), [
    ("--listen", "127.0.0.1:notaport", "give --listen as HOST:PORT"),
    ("--health-listen", "nowhere", "give --health-listen as HOST:PORT"),
    ("--listen", "no-such-host.invalid:5", "give --listen an address of this host"),
    # A port beyond 65535 was an OverflowError, exit 70.
    ("--metrics-listen", "127.0.0.1:99999", "give a port from 0 (any free one) to 65535"),
    ("--metrics-listen", "no-such-host.invalid:9464", "give --metrics-listen an address of this host"),
    # A socket.gaierror, exit 70.
    ("--tracker-listen", "no-such-host.invalid:0", "give --tracker-listen an address of this host"),
    ("--tracker-listen", "no-such-host.invalid:9190", "give --tracker-listen an address of this host"),
])
def test_a_bad_listen_address_is_one_line(farm_exe, tmp_path, flag, listen, fix):
    """Its fix was the taken port's ("stop what holds the port") whatever was wrong."""
    proc = _coordinator(farm_exe, tmp_path, flag, listen, "--registry", f"sqlite:///{tmp_path / 'r.db'}")
    line = _refused(proc)
    assert listen.rpartition(":")[0] in line and flag in line and f"({fix}" in line, line
    assert "holds the port" not in line and "free the port" not in line, line


def test_a_tracker_that_fails_after_the_metrics_started_frees_their_port(tmp_path):
    """The metrics address is served first (a bad one ends the start before a tracker process is
    made); a later failure stops it again, so the port and the collectors are free for a retry."""
    from coordinator.metrics import serve_metrics
    from coordinator.server import serve
    from foundation.errors import FarmError
    from foundation.registry import RegistryStore

    metrics_port = free_port()
    registry = f"sqlite:///{tmp_path / 'r.db'}"
    with TrackerProcess("127.0.0.1", 0) as other_farms, pytest.raises(FarmError, match="did not start"):
        serve("127.0.0.1:0", registry, tracker_listen=f"127.0.0.1:{other_farms.port}",
              metrics_listen=f"127.0.0.1:{metrics_port}")
    store = RegistryStore(registry)
    try:
        again = serve_metrics(f"127.0.0.1:{metrics_port}", store)  # the port bound and the collector registered anew
        again.stop()
    finally:
        store.dispose()
