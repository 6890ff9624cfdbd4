"""Helpers the tests share: plain functions and values, no fixtures (those are in conftest.py files),
except in the pytest plugins tests/conftest.py loads (cpu_time, quiet_box)."""
