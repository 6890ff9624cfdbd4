"""bench/cost_model_transfer.py's leave-one-out as a figure: per held-out fingerprint, each model's
pairwise accuracy and top-5 recall, with the means; written beside its JSON.

    .venv/bin/python bench/cost_model_transfer_plot.py docs/results/cost-model-transfer-CPU.json [--out F.png]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# The models the goals compare; the blend and fine-tuning stay in the table.
SHOWN = ("untrained", "own 7%", "cross, no device", "cross + device")
MEASURES = (("pairwise_accuracy", "pairs in the right order"), ("top5_recall", "top-5 recall"))


def _label(summary: str) -> str:
    """'AMD EPYC x86_64, 2 cores, avx2, llvm mcpu=znver3' as 'znver3\n2 cores'."""
    parts = summary.split(", ")
    cores = next((p for p in parts if p.endswith(("cores", "core"))), "")
    code = summary.rsplit("mcpu=", 1)[-1] if "mcpu=" in summary else parts[-1]
    return f"{code}\n{cores}"


def plot(report: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only
    import matplotlib.pyplot as plt

    held = sorted({row["held_out"] for row in report["rows"]})
    score = {(row["held_out"], row["model"]): row for row in report["rows"]}
    labels = [_label(report["fingerprints"][f]["summary"]) for f in held] + ["mean"]
    figure, axes = plt.subplots(len(MEASURES), 1, figsize=(max(8, 1.5 * len(labels)), 7), sharex=True)
    width = 0.8 / len(SHOWN)
    for ax, (measure, title) in zip(axes, MEASURES):
        for i, model in enumerate(SHOWN):
            values = [score[(f, model)][measure] for f in held] + [report["summary"][model][measure]]
            ax.bar([x + (i - (len(SHOWN) - 1) / 2) * width for x in range(len(labels))], values, width, label=model)
        ax.set_ylabel(title)
        ax.set_ylim(0, 1)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(ncol=len(SHOWN), fontsize=8, loc="upper left")
    axes[-1].set_xticks(range(len(labels)), labels, fontsize=7)
    figure.suptitle(f"Leave one fingerprint out: ranking a box's records it never saw\n{report['cpu']}, "
                    f"{report['date'][:10]}", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="the PNG (default: the JSON's name, .png)")
    args = parser.parse_args(argv)
    try:
        report = json.loads(args.report.read_text())
    except (OSError, ValueError) as err:
        print(f"error: cannot read {args.report}: {err}", file=sys.stderr)
        return 2
    print(plot(report, args.out or args.report.with_suffix(".png")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
