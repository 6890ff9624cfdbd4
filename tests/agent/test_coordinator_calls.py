"""The agent's calls retried through a coordinator outage: real gRPC calls to a loopback port
nothing listens on, said on the first tries, then now and then, and the answer after them."""

from __future__ import annotations

import logging
import socket
import threading

import grpc

from agent.coordinator_calls import retry_unavailable
from agent.state.policy import RETRIES_SAID_EVERY, Backoff


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_outage_is_said_on_the_first_tries_then_now_and_then_and_its_end(caplog):
    channel = grpc.insecure_channel(f"127.0.0.1:{_closed_port()}")
    unreachable = channel.unary_unary("/farm.Coordinator/Nothing")
    failing = 2 * RETRIES_SAID_EVERY + 1
    tries = []

    def call():
        tries.append(1)
        if len(tries) <= failing:
            unreachable(b"", timeout=5)  # UNAVAILABLE: nothing listens there
        return "answered"

    with caplog.at_level(logging.INFO, logger="farm.agent"):
        reply = retry_unavailable(call, threading.Event(), "report records", backoff=Backoff(0.001, 0.001))
    channel.close()
    assert reply == "answered" and len(tries) == failing + 1
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 5, warned  # tries 1, 2, 3, 12, 24
    assert all(m.startswith("report records: coordinator unavailable (") for m in warned)
    assert warned[2].endswith(f"(try 3; said every {RETRIES_SAID_EVERY} tries from now on)")
    assert warned[3].endswith(f"(try {RETRIES_SAID_EVERY})") and warned[4].endswith(f"(try {2 * RETRIES_SAID_EVERY})")
    answered = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert answered == [f"report records: the coordinator answered after {failing} failed tries"]


def test_an_answer_at_once_says_nothing(caplog):
    with caplog.at_level(logging.INFO, logger="farm.agent"):
        assert retry_unavailable(lambda: 7, threading.Event(), "report records") == 7
    assert caplog.records == []
