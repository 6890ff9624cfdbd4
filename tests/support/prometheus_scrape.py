"""One Prometheus scrape of a live process's /metrics, read by the live metrics tests."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    """One scrape: its text, and its samples by name."""

    def __init__(self, port: int):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
            assert reply.status == 200 and reply.headers["Content-Type"].startswith("text/plain")
            self.text = reply.read().decode()
        self.families = {_series_name(f): f for f in text_string_to_metric_families(self.text)}

    def value(self, name: str, **labels: str) -> float:
        """The sum of a series' samples whose labels include ``labels`` (0 when none)."""
        return sum(s.value for f in self.families.values() for s in f.samples
                   if s.name == name and labels.items() <= s.labels.items())

    def labels(self, name: str) -> list[dict[str, str]]:
        return [s.labels for f in self.families.values() for s in f.samples if s.name == name]


def _series_name(family) -> str:
    # The parser names a counter's family without its _total, as OpenMetrics does.
    return family.name + "_total" if family.type == "counter" else family.name
