"""The token through the real commands: a coordinator that will not listen beyond loopback
without one, and agents and clients refused, in one line, without the coordinator's."""

from __future__ import annotations

import json
import os
import subprocess

from support.polling import wait_for

TOKEN = "a-token-only-this-test-knows"


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode not in (0, None), proc
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def test_no_coordinator_beyond_loopback_without_a_token(farm_exe, tmp_path):
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home")}
    for name in ("FARM_TOKEN", "FARM_TOKEN_FILE"):
        env.pop(name, None)
    proc = subprocess.run([farm_exe, "coordinator", "--listen", "0.0.0.0:0", "--tracker-listen", "127.0.0.1:0"],
                          env=env, capture_output=True, text=True, timeout=120)
    line = one_error_line(proc)
    assert proc.returncode == 2
    assert "beyond loopback, without a token" in line and "FARM_TOKEN" in line and "--token-file" in line
    assert not (tmp_path / "home" / "registry.db").exists(), "refused before touching the registry"


def test_clients_and_agents_need_the_token(make_cluster, tmp_path):
    cluster = make_cluster(token=TOKEN)
    cluster.start_coordinator()
    without = {**cluster.env("client"), "FARM_COORDINATOR": cluster.address}
    without.pop("FARM_TOKEN")

    refused = subprocess.run([cluster.exe, "agents"], env=without, capture_output=True, text=True, timeout=120)
    line = one_error_line(refused)
    assert f"the coordinator at {cluster.address} refused the call" in line and "FARM_TOKEN" in line

    wrong = subprocess.run([cluster.exe, "jobs", "--json"], env={**without, "FARM_TOKEN": "guess"},
                           capture_output=True, text=True, timeout=120)
    assert "is not this coordinator's" in one_error_line(wrong)
    document = json.loads(wrong.stdout)  # --json: the error is also the one document on stdout
    assert "is not this coordinator's" in document["error"] and document["exit_code"] == wrong.returncode == 2
    assert document["hint"].endswith("FARM_TOKEN or --token-file")

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    listed = subprocess.run([cluster.exe, "agents", "--json", "--token-file", str(token_file)], env=without,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and listed.stdout.strip() == "[]", listed.stderr

    # An agent with the wrong token stops at once with one line, not a traceback or a retry loop.
    agent = subprocess.run([cluster.exe, "agent", "--coordinator", cluster.address, "--build-workers", "1"],
                           env={**cluster.env("rogue"), "FARM_TOKEN": "guess"}, capture_output=True, text=True,
                           timeout=300)
    last = agent.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "refused this agent (UNAUTHENTICATED)" in last and "FARM_TOKEN" in last
    assert agent.returncode == 2 and "Traceback" not in agent.stderr
    # One with the token registers, its RPC server beyond loopback without a warning: a farm with a
    # token is set up for a network, whose RPC ports the deploy recipes fence.
    cluster.start_agent("agent-1", options=("--rpc-host", "0.0.0.0"))
    [registered] = wait_for(lambda: json.loads(cluster.farm("agents", "--json").stdout), 120,
                            "the agent with the token registered")
    assert registered["id"].startswith("agent-")
    assert "INSECURE" not in cluster.log("agent-1")


def test_no_agent_rpc_server_beyond_loopback_without_a_token(farm_exe, tmp_path):
    """TVM's RPC server runs any code sent to it: refused before the agent calls anyone."""
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home")}
    for name in ("FARM_TOKEN", "FARM_TOKEN_FILE", "FARM_AGENT_ALLOW_INSECURE_RPC"):
        env.pop(name, None)
    for host_options in (["--rpc-host", "0.0.0.0"], ["--rpc-host", "::"]):
        proc = subprocess.run([farm_exe, "agent", "--coordinator", "127.0.0.1:9", *host_options], env=env,
                              capture_output=True, text=True, timeout=120)
        line = one_error_line(proc)
        assert proc.returncode == 2
        assert f"the TVM RPC server would listen on {host_options[1]}, beyond loopback, on a farm without a token" \
            in line
        assert "FARM_TOKEN" in line and "--allow-insecure-rpc (FARM_AGENT_ALLOW_INSECURE_RPC=1)" in line


def test_an_rpc_server_address_not_of_this_box_is_refused_before_registering(farm_exe, tmp_path):
    """It registered, then ended with exit 70 (socket.gaierror, "Cannot assign requested address")."""
    import socket

    env = {**os.environ, "FARM_HOME": str(tmp_path / "home"), "FARM_TOKEN": TOKEN}
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        for options, said in ((["--rpc-host", "no-such-host.invalid"], "cannot listen on no-such-host.invalid "
                                                                         "(--rpc-host): "),
                              (["--rpc-host", "192.0.2.1"], "cannot listen on 192.0.2.1 (--rpc-host): "),
                              (["--rpc-port", str(taken)], f"cannot listen on 127.0.0.1:{taken} (--rpc-port): "
                                                           "the port is taken")):
            proc = subprocess.run([farm_exe, "agent", "--coordinator", "127.0.0.1:9", *options], env=env,
                                  capture_output=True, text=True, timeout=120)
            line = one_error_line(proc)
            assert proc.returncode == 2 and said in line, line


def test_an_insecure_rpc_server_starts_only_when_asked_and_says_so(make_cluster):
    cluster = make_cluster()
    cluster.start_coordinator()
    cluster.start_agent("agent-1", options=("--rpc-host", "0.0.0.0", "--allow-insecure-rpc"))
    cluster.wait_agents(1)
    [warning] = [line for line in cluster.log("agent-1").splitlines() if "INSECURE" in line]
    assert " WARNING farm.agent: INSECURE: the TVM RPC server listens on 0.0.0.0, beyond loopback" in warning
    assert "anyone who reaches its port can run any code on this box" in warning
