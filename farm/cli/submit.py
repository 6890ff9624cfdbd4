"""`farm submit` and `farm run`: tune a model (or take it from the registry) and use it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer

from farm.cli.command import FarmTyper
from farm.cli.coordinator_options import coordinator_options
from farm.cli.options import JSON_OPTION, REGISTRY_OPTION, env_option, finite_number
from farm.cli.output import emit_json, stdout_console
from farm.cli.run_files import checked_run_files, write_outputs
from farm.cli.shape_option import shape_option, shaped_model
from farm.connection import Coordinator
from foundation.domain.jobs import JobState
from foundation.domain.reuse import ReuseMode
from foundation.domain.submission import asked_submission
from foundation.domain.tuning_rounds import DEFAULT_PATIENCE, DEFAULT_ROUNDS
from foundation.errors import BadInput, Interrupted, JobFailed

app = FarmTyper()

MODEL_ARG = typer.Argument(..., metavar="MODEL", help="A zoo model (see `farm models`) or a path to an .onnx file.")
TARGET_ARG = typer.Argument(..., metavar="TARGET", help="llvm, cuda, or a TVM target JSON object.")
BATCH_ARG = typer.Argument(1, metavar="BATCH", help="Batch size (for bert: number of sequences).")
# `farm submit --help` lists the options that apply to one way of running apart (farm.cli.command).
EMBEDDED_ONLY = "Embedded only (without --coordinator)"
THROUGH_A_COORDINATOR = "Through a coordinator"
IN_ROUNDS = "Tuning in rounds (--until)"


@app.command()
@coordinator_options(panel=THROUGH_A_COORDINATOR)
def submit(
    model: str = MODEL_ARG,
    target: str = TARGET_ARG,
    batch: int = BATCH_ARG,
    trials: int | None = env_option(None, "--trials", command="submit", min=1, metavar="N",
                                    help="Global trial budget (default: 32 per task)."),
    trials_per_task: int | None = env_option(
        None, "--trials-per-task", command="submit", min=1, metavar="N",
        help="Per-task trial cap (default: 32, or --trials when that is given)."),
    retune: bool = env_option(False, "--retune", command="submit",
                              help="Tune even if the registry has a library; records merge."),
    reuse: ReuseMode | None = env_option(
        None, "--reuse", command="submit", case_sensitive=False,
        help="Tasks whose workload already has measured records here: auto (the default; off with --retune) "
             "skips those measured at least as often as this job would, and tops up the rest with one "
             "batch; full skips them all; topup tops each up; off tunes every task with its plan."),
    warm_start: bool = env_option(
        True, "--warm-start/--cold", command="submit",
        help="Seed the search from similar workloads' records and start from the fingerprint's trained cost "
             "model (default), or tune from nothing."),
    build_workers: int | None = env_option(
        None, "--build-workers", command="submit", min=1, metavar="N", rich_help_panel=EMBEDDED_ONLY,
        help="Builder processes (default: all CPUs)."),
    runs: int = env_option(20, "--runs", command="submit", min=1, metavar="N",
                           help="Timed runs of the final library (after 3 warm-up runs)."),
    seed: int = env_option(0, "--seed", command="submit", metavar="N",
                           help="Seed for the search, the random weights and the inputs."),
    weights_layout: str = env_option(
        "auto", "--weights-layout", command="submit", metavar="LAYOUT",
        help="plain, prepacked (CPU only: tuning may rearrange the weights, which the library does once "
             "at load; you still pass plain weights), prepacked-nchwc (prepacked, and the convolutions' "
             "activations in blocks of 8 or 16 channels) or auto (the farm's default for the target: "
             "prepacked-nchwc on CPUs, plain on GPUs)."),
    registry: str | None = REGISTRY_OPTION,
    coordinator: Coordinator = None,
    fingerprint: str | None = env_option(
        None, "--fingerprint", command="submit", metavar="ID",
        help="With --coordinator: tune for this fingerprint only. Embedded: be answered by this fingerprint's "
             "library, this CPU at another size (default: this box's, else the nearest such one's)."),
    wait: bool = env_option(True, "--wait/--no-wait", command="submit", rich_help_panel=THROUGH_A_COORDINATOR,
                            help="With --coordinator: follow the job until it ends."),
    timeout: float | None = env_option(
        None, "--timeout", command="submit", parser=finite_number(0), metavar="SECONDS",
        rich_help_panel=THROUGH_A_COORDINATOR,
        help="With --wait: give up waiting after this many seconds."),
    until: str | None = env_option(
        None, "--until", command="submit", metavar="GOAL", rich_help_panel=IN_ROUNDS,
        help="Tune in rounds until the built model beats onnxruntime on this box (`onnxruntime`: the model's "
             "ONNX form, checked against TVM first) or a latency (`20ms`), within the budget: its upper quartile "
             "at or below the goal, timed interleaved (README). With --coordinator the coordinator's CPU times "
             "it."),
    patience: int | None = env_option(
        None, "--patience", command="submit", min=1, metavar="ROUNDS", rich_help_panel=IN_ROUNDS,
        help=f"With --until: stop when the estimated latency has not improved for this many rounds "
             f"(default {DEFAULT_PATIENCE})."),
    round_trials: int | None = env_option(
        None, "--round-trials", command="submit", min=1, metavar="N", rich_help_panel=IN_ROUNDS,
        help=f"With --until: trials per round (default: the budget in {DEFAULT_ROUNDS} rounds)."),
    report_dir: Path | None = env_option(
        None, "--report", command="submit", metavar="DIR",
        help="At the end, write the job's report (JOB.png, JOB.md) into this directory; with --coordinator it "
             "reads the coordinator's registry (--registry)."),
    shape: list[str] | None = shape_option("submit"),
    dry_run: bool = env_option(
        False, "--dry-run", command="submit", rich_help_panel=EMBEDDED_ONLY,
        help="Print the plan (tasks, trials per task, the weights layout chosen, what reuse skips, an estimate of "
             "time from this box's past jobs) and stop: no job, nothing written."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Tune MODEL for TARGET at BATCH, build and validate it, and store the library.

    With --coordinator (or FARM_COORDINATOR) the farm's agents do the work; otherwise it runs
    here, embedded, on the registry given by --registry.
    """
    # Checked as farm.submit and the coordinator check theirs, each value named as its option.
    submission = asked_submission(
        model=model, target=target, batch=batch, trials=trials, trials_per_task=trials_per_task, retune=retune,
        reuse=reuse, seed=seed, warm_start=warm_start, runs=runs, weights_layout=weights_layout, until=until,
        patience=patience, round_trials=round_trials, build_workers=build_workers, fingerprint=fingerprint,
        spelled=option_name)
    if report_dir is not None:
        from farm.cli.report_cmd import check_report_dir

        check_report_dir(report_dir)
    submission = replace(submission, model=shaped_model(model, batch, shape))
    if dry_run:
        from farm.cli.dry_run_view import print_plan

        if coordinator.address:
            raise BadInput("--dry-run plans here, embedded", "leave out --coordinator and FARM_COORDINATOR")
        return print_plan(submission, registry, json_output=json_output)
    if coordinator.address:
        from farm.cli.cluster import remote_submit

        return remote_submit(coordinator.client(), submission, wait=wait, timeout=timeout, json_output=json_output,
                             report_dir=report_dir, registry=registry)
    from farm.cli.interrupts import cancel_on_signals
    from farm.embedded import submit as submit_job
    from farm.submit_values import SubmitRequest
    from foundation.meta_schedule.measure import MeasureSettings

    # This process's threads are the command's own: its workers' zygote can be a fork of it.
    request = SubmitRequest.of(submission, registry=registry,
                               measure=MeasureSettings(build_workers=build_workers, zygote_forked_here=True))
    observer = None
    if not json_output:
        from farm.cli.progress import ConsoleProgress

        observer = ConsoleProgress()
    notify = (lambda line: observer.stage("cancelling", line)) if observer else None
    with cancel_on_signals(notify) as cancellation:
        result = submit_job(request, observer, cancellation)
    report = None
    if report_dir is not None and (result.report or result.artifact):
        from farm.cli.report_cmd import write_job_report

        # A registry hit tuned nothing: its report is that of the job that made the artifact.
        tuned_by = result.artifact.job_id if result.cache_hit and result.artifact else result.job.id
        report = write_job_report(tuned_by, report_dir, registry) if tuned_by else None
    if result.job.state is JobState.SUCCEEDED:
        if json_output:
            emit_json({**result.to_json(), "report": report})
        else:
            _print_submit(result)
            if report:
                stdout_console().print(f"report       {report['markdown']} and {report['png']}")
        return
    document = {**result.to_json(), "report": report} if json_output else None
    if not json_output and cancellation.signum is None:
        _print_submit(result)
    job, trials_done = result.job, result.to_json()["trials"]
    kept = f"its {trials_done} measured records are kept" if trials_done else "it measured nothing"
    if result.job.state is JobState.CANCELLED and cancellation.signum is not None:
        raise Interrupted(f"job {job.id} cancelled ({job.error})",
                          f"{kept}; the same submit continues from them", signum=cancellation.signum,
                          document=document)
    raise JobFailed(f"job {job.id} {job.state}: {job.error}",
                    f"{kept}; see `farm status {job.id}`", document=document)


def option_name(name: str) -> str:
    """A submit's field as its option is spelled: round_trials is --round-trials."""
    return "--" + name.replace("_", "-")


@app.command()
def run(
    model: str = typer.Argument(..., metavar="MODEL", help="A zoo model (see `farm models`), a path to an .onnx "
                                                           "file, or a library written by `farm export` (.so)."),
    target: str | None = typer.Argument(None, metavar="TARGET", help="llvm, cuda, or a TVM target JSON object "
                                                                     "(none for an exported library)."),
    batch: int = BATCH_ARG,
    input_path: Path | None = env_option(None, "--input", command="run", metavar="FILE",
                                         help="A .npy file for the (single) input; default: seeded random."),
    output_path: Path | None = env_option(None, "--output", command="run", metavar="FILE",
                                          help="Write the outputs: .npy (one output) or .npz."),
    runs: int = env_option(20, "--runs", command="run", min=1, metavar="N", help="Timed runs after warm-up."),
    warmup: int = env_option(3, "--warmup", command="run", min=0, metavar="N", help="Untimed runs first."),
    seed: int = env_option(0, "--seed", command="run", metavar="N", help="Seed for random weights and inputs."),
    weights_layout: str | None = env_option(
        None, "--weights-layout", command="run", metavar="LAYOUT",
        help="Load only an artifact of this form (plain, prepacked or prepacked-nchwc); default: the newest of "
             "any (all take plain weights)."),
    threads: str = env_option(
        "auto", "--threads", command="run", metavar="N|auto",
        help="CPU threads its kernels run on; auto: what validation chose, one for a library under 1 ms on one "
             "thread at most 1.5x its time on every core (robust where other work holds the cores), else every core."),
    fingerprint: str | None = env_option(
        None, "--fingerprint", command="run", metavar="ID",
        help="Load this fingerprint's library: this CPU at another size (default: this box's, else the nearest "
             "such one's)."),
    registry: str | None = REGISTRY_OPTION,
    shape: list[str] | None = shape_option("run"),
    json_output: bool = JSON_OPTION,
) -> None:
    """Load the stored library for MODEL/TARGET/BATCH (no compile), run it and time it; or MODEL.so, a
    library `farm export` wrote, with its spec beside it."""
    import time

    import numpy as np

    from farm.exported_model import is_exported

    if is_exported(model):
        from farm.cli.run_exported import run_exported

        given = {"TARGET": target, "--weights-layout": weights_layout, "--fingerprint": fingerprint}
        return run_exported(Path(model), [name for name, value in given.items() if value is not None],
                            input_path=input_path, output_path=output_path, runs=runs, warmup=warmup, seed=seed,
                            threads=threads, json_output=json_output)
    if target is None:
        raise BadInput("missing argument 'TARGET'", "see `farm run --help`")

    from farm.api import load
    from foundation.job_driver.artifacts import artifact_json
    from foundation.runtime.threads import parse_threads
    from foundation.units import duration, milliseconds

    given = checked_run_files(runs, warmup, seed, input_path, output_path)  # before anything loads
    model = shaped_model(model, batch, shape)
    begin = time.perf_counter()
    deployed = load(model, target, batch, registry=registry, seed=seed, weights_layout=weights_layout,
                    threads=parse_threads(threads), fingerprint=fingerprint)
    loaded_s = time.perf_counter() - begin
    if given is not None:
        deployed.check_inputs([given])
    inputs = [given.read()] if given is not None else deployed.example_inputs(seed)
    first = time.perf_counter()
    outputs = deployed(*inputs)
    first_s = time.perf_counter() - first
    if output_path:
        write_outputs(output_path, outputs)
    latency = deployed.time(inputs, runs=runs, warmup=warmup)
    document = {
        "artifact": deployed.artifact.id,
        "model": deployed.key.name,
        "batch": batch,
        "fingerprint": deployed.fingerprint,
        "tuned_on": deployed.artifact.fingerprint_id,  # another one: this CPU at another size
        "latency_ms": latency.to_json(),
        "load_s": round(loaded_s, 4),
        "first_inference_s": round(first_s, 4),
        "threads": deployed.library.threads,
        "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype)} for o in outputs],
        "stored": artifact_json(deployed.artifact),
    }
    if json_output:
        emit_json(document)
        return
    console = stdout_console()
    console.print(f"artifact   {deployed.artifact.id}  ({deployed.key.describe()}, fingerprint {deployed.fingerprint}, "
                  f"{deployed.artifact.weights_layout} weights)")
    if deployed.artifact.fingerprint_id != deployed.fingerprint:
        console.print(f"tuned on   {deployed.artifact.fingerprint_id}, this CPU at another size: timed here below "
                      f"(`farm submit --retune` tunes one for {deployed.fingerprint})")
    console.print(f"load       {duration(loaded_s)}, first inference {duration(first_s)}, "
                  f"{deployed.library.threads} thread{'s' if deployed.library.threads != 1 else ''}")
    console.print(f"latency    mean {milliseconds(latency.mean_ms)}  median {milliseconds(latency.median_ms)}  "
                  f"std {milliseconds(latency.std_ms)}  ({latency.runs} runs after {latency.warmup} warm-up)")
    for i, out in enumerate(outputs):
        console.print(f"output {i}   {out.dtype}{list(out.shape)}  mean {float(np.mean(out)):.6g}")
    if output_path:
        console.print(f"wrote      {output_path}")


def tuning_estimate_text(result) -> str:
    """The summary's clause on what tuning's own measurements predicted for the library ('' without
    them). Tuning measures each candidate while others compile beside it on the same cores. Tasks
    the registry answered (reuse) were not tuned: the sum covers the tuned ones, and says so."""
    from foundation.meta_schedule.progress import estimated_latency
    from foundation.units import duration

    during = estimated_latency(result.report.tasks)
    if not during:
        return ""
    skipped = result.reuse.skipped if result.reuse else 0
    scope = f" of the {len(result.report.tasks)} tasks it tuned ({skipped} reused, not counted)" if skipped else ""
    return f"; tuning's own measurements{scope}, taken beside candidate builds, added up to {duration(during)}"


def _print_submit(result) -> None:
    from farm.cli.views import latency_text
    from foundation.units import duration, size

    console = stdout_console()
    job = result.job
    console.print(f"job          {job.id}  {job.state}{'  (registry hit: no tuning)' if result.cache_hit else ''}")
    console.print(f"model        {result.model.describe()}  target {result.target}  "
                  f"weights {result.weights_layout.value}")
    if result.layout_choice:
        console.print(f"             {result.layout_choice.why}")
    console.print(f"fingerprint  {result.fingerprint}")
    if result.artifact is not None and result.artifact.fingerprint_id != result.fingerprint:
        console.print(f"tuned on     {result.artifact.fingerprint_id}, this CPU at another size")
    if result.reuse:
        console.print(f"reuse        {result.reuse.describe()}")
    if result.report:
        r = result.report
        console.print(f"tuning       {r.trials} trials over {len(r.tasks)} tasks in {duration(r.seconds)}"
                      + (f", {r.errors} measurement errors" if r.errors else ""))
        plan = result.plan
        reused = {t.name for t in result.reuse.tasks if t.action.value != "tune"} if result.reuse else set()
        unplanned = [t for t in plan.tasks if t.trials == 0 and not t.minor and t.name not in reused] if plan else []
        if unplanned:
            # The plan gives the largest shares of the model's latency their trials first; a
            # budget below the tasks that matter leaves the rest with TVM's naive default schedule.
            console.print(f"warning      {len(unplanned)} of {len(r.tasks)} tasks got no trials (budget "
                          f"{plan.budget} is too small for them); they run untuned. Raise --trials.")
        from foundation.meta_schedule.warm.job_start import warm_start_text

        console.print(f"warm start   {warm_start_text(r)}")
    if result.until:
        console.print(f"until        {result.until.summary()}")
    if job.error:
        console.print(f"error        {job.error}")
    art = result.artifact
    if art:
        console.print(f"artifact     {art.id}  sha256 {art.sha256[:16]}…  {size(art.size)}")
        latency = {"mean": art.latency_mean_ms, "median": art.latency_median_ms, "std": art.latency_std_ms}
        console.print(f"latency      {latency_text(latency, art.untuned_latency_mean_ms)}")
        if result.report and not result.cache_hit:
            console.print("             timed here after tuning, its worker processes stopped"
                          + tuning_estimate_text(result))
        v = art.validation or {}
        if v:
            console.print(f"validation   {'passed' if v.get('passed') else 'FAILED'}: max abs err "
                          f"{v.get('max_abs_err', 0):.3g} (rtol {v.get('rtol')}, atol {v.get('atol', 0):.3g})")
        if v.get("speed"):  # the tuned library against the untuned build, timed interleaved
            from foundation.domain.untuned_speed import SpeedCheck

            speed = SpeedCheck.from_json(v["speed"])
            console.print(f"{'WARNING' if speed.slower_than_untuned else 'untuned':<13}{speed.describe()}")
    from foundation.domain.job_spec import job_notes
    from foundation.job_driver.built_untuned import describe_built_untuned

    built_untuned = describe_built_untuned(job_notes(job).built_untuned)
    if built_untuned and art:
        console.print(f"fallback     {built_untuned}")
    console.print(f"time         {duration(result.seconds)}")
