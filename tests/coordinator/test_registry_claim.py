"""One coordinator per registry: a second `farm coordinator` on the same registry is refused in one
line naming the first (exit 4), and one that died leaves no claim behind. Two coordinators on one
registry each leased the other's jobs to their own agents."""

from __future__ import annotations

from sqlalchemy import create_engine, text

from foundation.registry.engine import parse_registry_url

from support.farm_process import FarmProcess, run_farm
from support.polling import wait_for


def _coordinator(registry_url: str) -> tuple[str, ...]:
    return ("coordinator", "--registry", registry_url, "--listen", "127.0.0.1:0", "--tracker-listen", "127.0.0.1:0")


def _claimed_by(registry_url: str) -> str:
    """Who holds the registry's claim, as the holder says (coordinator.registry_claim); "" if none."""
    parsed = parse_registry_url(registry_url)
    if parsed.get_backend_name() == "sqlite":
        try:
            with open(parsed.database + ".coordinator", encoding="utf-8") as claim:
                return claim.read()
        except FileNotFoundError:
            return ""
    engine = create_engine(parsed)
    try:
        with engine.connect() as connection:
            names = connection.scalars(text("SELECT application_name FROM pg_stat_activity "
                                            "WHERE datname = current_database()")).all()
    finally:
        engine.dispose()
    return " ".join(n for n in names if n.startswith("farm-coordinator "))


def _serving(registry_url: str, coordinator: FarmProcess) -> str:
    def serving():
        assert coordinator.proc.poll() is None, coordinator.finish(timeout=30)
        holder = _claimed_by(registry_url)
        return f"pid {coordinator.pid} " in holder and "serving 127.0.0.1:" in holder and holder
    return wait_for(serving, 120, f"coordinator {coordinator.pid} serving", interval=0.2)


def test_a_second_coordinator_on_a_registry_is_refused_until_the_first_is_gone(farm_exe, tmp_path, registry_url):
    first = FarmProcess.start(farm_exe, tmp_path / "first", *_coordinator(registry_url))
    try:
        _serving(registry_url, first)
        second = run_farm(farm_exe, tmp_path / "second", *_coordinator(registry_url), timeout=120)
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert second.returncode == 4, second
        assert len(lines) == 1 and lines[0].startswith("error: another coordinator serves the registry at "), lines
        assert f"pid {first.pid} on " in lines[0] and "serving 127.0.0.1:" in lines[0], lines
        assert "Traceback" not in second.stderr
    finally:
        first.kill()  # SIGKILL: nothing of it gets to let go of its claim

    again = FarmProcess.start(farm_exe, tmp_path / "again", *_coordinator(registry_url))
    try:
        _serving(registry_url, again)
        again.interrupt_group()
        code, _, err = again.finish(timeout=120)
        assert code in (0, 130, 143), err
    finally:
        again.kill()
