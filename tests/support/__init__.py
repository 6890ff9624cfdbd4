"""Helpers the tests share: plain functions and values, no fixtures (those are in conftest.py files)."""
