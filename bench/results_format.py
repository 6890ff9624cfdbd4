"""How docs/benchmarks.md writes its figures (bench/results_page.py): the raw results and their index
(Page), and the cells and tables every section draws the same way."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
HAND = "‡"


def load_index(results: Path = RESULTS) -> dict:
    return json.loads((results / "index.json").read_text())


def read_json(results: Path, name: str):
    return json.loads((results / name).read_text())


def link(name: str) -> str:
    return f"[{name}](results/{name})"


def times(ratio: float) -> str:
    return f"{ratio:.2f}x"


def ms(value: float) -> str:
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def day(text: str) -> str:
    return text[:10]


def mmss(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)  # rounded first: 359.5 s is 6 min 0 s, not 5 min 60 s
    return f"{minutes} min {rest} s"


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


class Page:
    """The raw results and the index, with a row's CPU name and source cell read the same way everywhere."""

    def __init__(self, results: Path = RESULTS):
        self.results = results
        self.index = load_index(results)
        self.cpus = self.index["cpus"]

    def cpu(self, row: dict) -> str:
        return self.cpus[row["cpu"]].split(" (")[0]

    def source(self, row: dict) -> str:
        if "file" in row:
            return link(row["file"])
        if "files" in row:  # one figure pooled over several runs
            return " ".join(map(link, row["files"]))
        return f"{HAND} \"{row['from']}\""

    def raw(self, name: str):
        return read_json(self.results, name)
