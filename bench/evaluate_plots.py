"""The evaluation's figures, in the thesis's style: latency bars per case, best latency against trials,
and the heaviest kernels' share of the box's peak."""

from __future__ import annotations

from pathlib import Path

COLORS = {"TVM untuned": "tab:red", "TVM farm-tuned": "tab:green", "onnxruntime": "tab:blue",
          "PyTorch eager": "tab:orange", "torch.compile": "tab:brown", "TVM pipeline": "tab:purple"}
# Kernels shown per library in the peak-share figure, heaviest first.
TOP_KERNELS = 12


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only
    import matplotlib.pyplot as plt

    return plt


def _subtitle(report: dict) -> str:
    m = report["machine"]
    return (f"{m['cpu']}, {m['logical_cpus']} logical CPUs\n{report['date_utc'][:16].replace('T', ' ')} UTC, "
            f"load average {m['loadavg_start'][0]}-{m['loadavg_end'][0]}")


def plot_latency(report: dict, path: Path) -> Path:
    """One group per (model, batch), one bar per engine: median with p10-p90 whiskers, log scale."""
    plt = _pyplot()
    cases = report["cases"]
    engines = [name for name in COLORS if any(name in c["engines"] for c in cases)]
    width = 0.8 / max(1, len(engines))
    figure, axes = plt.subplots(figsize=(max(6.0, 2.2 * len(cases) + 2), 5), constrained_layout=True)
    for index, name in enumerate(engines):
        xs, medians, low, high = [], [], [], []
        for position, case in enumerate(cases):
            s = case["engines"].get(name)
            if s is None:
                continue
            xs.append(position + (index - (len(engines) - 1) / 2) * width)
            medians.append(s["median_ms"])
            low.append(s["median_ms"] - s["p10_ms"])
            high.append(s["p90_ms"] - s["median_ms"])
        bars = axes.bar(xs, medians, width, yerr=[low, high], capsize=3, label=name, color=COLORS[name])
        for bar, value in zip(bars, medians):
            axes.annotate(f"{value:.3g}", (bar.get_x() + bar.get_width() / 2, value), ha="center", va="bottom",
                          fontsize="x-small", xytext=(0, 2), textcoords="offset points")
    axes.set_xticks(range(len(cases)))
    axes.set_xticklabels([f"{c['model']}\nbatch {c['batch']}\n{c['tuning']['trials']} trials" for c in cases])
    axes.set_yscale("log")
    axes.set_ylabel("latency per inference (ms, median; whiskers p10-p90)")
    axes.grid(True, axis="y", which="major", alpha=0.3)
    axes.legend(fontsize="small")
    axes.set_title("Inference latency on this CPU\n" + _subtitle(report), fontsize="medium")
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_trials(report: dict, path: Path) -> Path:
    """Per case: the model's latency as the best schedules so far estimate it, against trials,
    with the latencies measured in this run as horizontal lines."""
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    cases = report["cases"]
    figure, grid = plt.subplots(1, len(cases), figsize=(max(7.0, 5.0 * len(cases)), 5), constrained_layout=True,
                                squeeze=False)
    for axes, case in zip(grid[0], cases):
        curve = case["tuning"]["curve_trials_ms"]
        if curve:
            trials, ms = zip(*curve)
            axes.step(trials, ms, where="post", color="tab:gray",
                      label="estimated from tuning-time measurements")
        for name, style in (("TVM farm-tuned", "-"), ("onnxruntime", "--"), ("PyTorch eager", ":"),
                            ("torch.compile", (0, (3, 1, 1, 1))), ("TVM pipeline", (0, (5, 2))),
                            ("TVM untuned", "-.")):
            s = case["engines"].get(name)
            if s is not None:
                axes.axhline(s["median_ms"], color=COLORS[name], linestyle=style,
                             label=f"{name}, measured: {s['median_ms']:.3g} ms")
        boundary = 0
        for job in case["tuning"]["jobs"][:-1]:  # where a later job (--retune) took over
            boundary += job["trials"]
            axes.axvline(boundary, color="tab:gray", linewidth=0.8, alpha=0.5)
        axes.set(xlabel="trials (all tuning jobs of this model, in order)", ylabel="model latency (ms)",
                 yscale="log", title=f"{case['model']} batch {case['batch']}")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(True, which="major", alpha=0.3)
        axes.legend(fontsize="x-small")
    figure.suptitle("Best latency against trials\n" + _subtitle(report), fontsize="medium")
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_peak_share(report: dict, path: Path) -> Path:
    """Per case and profiled TVM library: its heaviest kernels in the model, each bar its share of the
    box's peak GFLOP/s, labelled with its time per inference."""
    plt = _pyplot()
    panels = [(case, engine, rows) for case in report["cases"] for engine, rows in case["kernels"].items()]
    figure, grid = plt.subplots(1, len(panels), figsize=(max(7.0, 6.0 * len(panels)), 6), constrained_layout=True,
                                squeeze=False)
    for axes, (case, engine, rows) in zip(grid[0], panels):
        shown = [row for row in rows if row["share_of_peak"] is not None][:TOP_KERNELS]
        labels = [row["kernel"][:40] for row in shown]
        bars = axes.barh(range(len(shown)), [row["share_of_peak"] * 100 for row in shown], color=COLORS[engine])
        for bar, row in zip(bars, shown):
            middle = bar.get_y() + bar.get_height() / 2
            axes.annotate(f"{row['ms']:.3g} ms x{row['calls']:.0f}", (bar.get_width(), middle), va="center",
                          fontsize="x-small", xytext=(2, 0), textcoords="offset points")
        axes.set_yticks(range(len(shown)))
        axes.set_yticklabels(labels, fontsize="x-small")
        axes.invert_yaxis()
        peak = case["peak_gflops"]
        axes.set(xlabel=f"share of the box's peak (%; {peak:.0f} GFLOP/s)" if peak else "share of the peak (%)",
                 title=f"{engine}: {case['model']} batch {case['batch']}")
        axes.grid(True, axis="x", alpha=0.3)
    figure.suptitle("Heaviest kernels in the model, speed against the box's peak\n" + _subtitle(report),
                    fontsize="medium")
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
