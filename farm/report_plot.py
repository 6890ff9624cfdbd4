"""The picture of `farm report`: each task's best latency against its trials, and the model's.

Latencies are drawn in the unit that fits them (us, ms or s). Legends sit beside the axes, never
over the data; beyond `NAMED_TASKS` tasks, the smallest share of the model is drawn in grey as
one "other" entry. The model's curve is dashed while some tasks are estimated, not measured
(farm.report.ModelPoint), and solid from the trial after which every task was measured.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from foundation.errors import BadInput

# matplotlib is the `report` extra: the images and a farm that only tunes go without it.
REPORT_EXTRA_FIX = "install the farm's plotting: pip install 'tvm-farm[report]'"

# Tasks named in the per-task legend, largest share of the model first; the rest are "other".
NAMED_TASKS = 8
_UNITS = (("us", 1e-6), ("ms", 1e-3), ("s", 1.0))


def time_unit(seconds: Iterable[float]) -> tuple[str, float]:
    """The unit (name, seconds per unit) that shows ``seconds`` with the fewest digits: chosen by
    the largest, so that it reads from 1 to below 1000."""
    largest = max((s for s in seconds if s is not None and s > 0), default=1e-3)
    for name, scale in _UNITS:
        if largest < scale * 1000:
            return name, scale
    return _UNITS[-1]


def require_matplotlib() -> None:
    """BadInput (exit 2) naming the `report` extra where matplotlib cannot be imported: checked
    before a report is asked of the registry, and before `farm submit --report` tunes anything."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise BadInput("a report is drawn with matplotlib, which is not installed", REPORT_EXTRA_FIX) from None


def plot(report, path: Path) -> None:
    """Draw ``report`` (a farm.report.JobReport) into the PNG file ``path``."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, no GUI toolkit
    import matplotlib.pyplot as plt

    job, model = report.job, report.model
    figure, (by_task, whole) = plt.subplots(1, 2, figsize=(15, 5.5), constrained_layout=True)
    if report.tasks:
        _tasks(by_task, report.tasks)
    else:
        by_task.set(xlabel="trials of the task", title="no task tuned: every one was reused")
    _model(whole, report)
    figure.suptitle(f"{model.name} batch {model.batch}, {job.target_kind or 'target'} on {job.fingerprint_id}: "
                    f"{job.id}")
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _tasks(axes, tasks) -> None:
    ordered = sorted(tasks, key=lambda t: -(t.final or 0) * t.weight)
    unit, scale = time_unit(b for t in tasks for b in t.best if b is not None)
    others = ordered[NAMED_TASKS:] if len(ordered) > NAMED_TASKS + 1 else []
    grouped = {id(t) for t in others}
    other_label = f"other: {len(others)} smaller tasks"
    for task in ordered:
        points = [(i + 1, b / scale) for i, b in enumerate(task.best) if b is not None]
        if not points:
            continue
        if id(task) in grouped:
            line, = axes.step(*zip(*points), where="post", color="0.6", linewidth=0.8, label=other_label)
            other_label = None  # one entry for the group
        else:
            line, = axes.step(*zip(*points), where="post", label=f"{task.name[:40]} (x{task.weight})")
        # Its best so far, marked: a task measured once is a single point, which a step leaves unseen.
        axes.plot(*points[-1], marker="o", markersize=3, color=line.get_color())
    axes.set(xlabel="trials of the task", ylabel=f"best latency ({unit})", yscale="log",
             title="each task's best schedule so far (largest share of the model first)")
    _beside(axes, columns=2)
    _ticks(axes)


def _model(axes, report) -> None:
    curve = report.model_curve
    artifact = report.artifact
    lines = [p.seconds for p in curve]
    if artifact is not None:
        lines += [artifact.latency_mean_ms / 1e3, (artifact.untuned_latency_mean_ms or 0) / 1e3]
    unit, scale = time_unit(lines)
    estimated = [p for p in curve if p.estimated_tasks]
    measured = [p for p in curve if not p.estimated_tasks]
    if estimated:
        # Drawn up to the first fully measured point, so the two parts join.
        joined = estimated + measured[:1]
        axes.step([p.trials for p in joined], [p.seconds / scale for p in joined], where="post",
                  color="tab:blue", linestyle="--",
                  label=f"estimated: tasks not measured yet counted at the measured ones' FLOP rate "
                        f"({estimated[0].estimated_tasks} of {len(report.tasks)} after trial {estimated[0].trials})")
    if measured:
        axes.step([p.trials for p in measured], [p.seconds / scale for p in measured], where="post",
                  color="tab:blue", label="every task measured: each task's best by its calls")
        if estimated:
            axes.axvline(measured[0].trials, color="0.5", linestyle=":", linewidth=1,
                         label=f"every task measured after trial {measured[0].trials}")
    if artifact is not None:
        axes.axhline(artifact.latency_mean_ms / 1e3 / scale, color="tab:green", linestyle="--",
                     label=f"library timed after tuning: {artifact.latency_mean_ms / 1e3 / scale:.3g} {unit}")
        if artifact.untuned_latency_mean_ms:
            axes.axhline(artifact.untuned_latency_mean_ms / 1e3 / scale, color="tab:red", linestyle=":",
                         label=f"untuned: {artifact.untuned_latency_mean_ms / 1e3 / scale:.3g} {unit}")
    axes.set(xlabel="trials of the job", ylabel=f"model latency ({unit})", yscale="log",
             title="the model (each task's best, by its calls)")
    _beside(axes, columns=1)
    _ticks(axes)


def _beside(axes, columns: int) -> None:
    """The legend below the axes, where it covers no data."""
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(0.0, -0.13), ncol=columns, frameon=False)


def _ticks(axes) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    low, high = axes.get_ylim()
    # Within a decade 1-2-5 leaves one or two labels; more steps then.
    steps = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0) if low > 0 and high / low < 10 else (1.0, 2.0, 5.0)
    axes.yaxis.set_major_locator(LogLocator(base=10, subs=steps))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    axes.grid(True, which="major", alpha=0.3)
