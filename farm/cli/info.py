"""`farm models`, `farm fingerprint`, `farm jobs`: what the farm knows about."""

from __future__ import annotations

from farm.cli.command import FarmTyper
from farm.cli.coordinator_options import coordinator_options
from farm.cli.options import JSON_OPTION, REGISTRY_OPTION, env_option
from farm.cli.output import emit_json, print_table, stdout_console
from farm.connection import Coordinator

app = FarmTyper()


@app.command()
def models(json_output: bool = JSON_OPTION) -> None:
    """List the model zoo (any .onnx file can be submitted too)."""
    from foundation.models.zoo import ZOO, known_models

    rows = [
        {"name": name, "parameters": ZOO[name].parameter_count(), "input": ZOO[name].default_input,
         "description": ZOO[name].description}
        for name in known_models()
    ]
    if json_output:
        emit_json(rows)
        return
    print_table(("model", "parameters", "input (batch B)", "description"),
                [(r["name"], f"{r['parameters']:,}", r["input"], r["description"]) for r in rows])


@app.command()
def fingerprint(
    target: str = env_option("llvm", "--target", command="fingerprint", metavar="KIND",
                             help="Which device to describe: llvm (this CPU) or cuda."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Show this box's hardware fingerprint: the key its tuning records are stored under."""
    from foundation.hardware.fingerprint import local_fingerprint
    from foundation.hardware.targets import parse_target_kind
    from foundation.hardware.versions import software_versions

    fp = local_fingerprint(parse_target_kind(target))
    software = software_versions(fp.kind if fp.kind != "cpu" else "llvm")
    timing = None
    if fp.kind == "cpu":  # the cache state its candidates are timed in (foundation.domain.timing_context)
        from foundation.meta_schedule.timing_context import timing_context_here

        chosen = timing_context_here(fp.id)
        timing = {"context": chosen.context.value, "why": chosen.why}
    if json_output:
        emit_json({**fp.to_json(), "software": software, **({"timing_context": timing} if timing else {})})
        return
    console = stdout_console()
    console.print(f"fingerprint  {fp.id}")
    console.print(f"summary      {fp.summary}")
    for k, v in fp.details.items():
        console.print(f"  {k:<18} {v}")
    console.print("software     " + ", ".join(f"{k} {v}" for k, v in software.items()))
    if timing:
        console.print(f"timing       {timing['context']}: {timing['why']}", markup=False)


def versions_text() -> str:
    """`farm --version`: farm's own, then the compiler stack's, without importing TVM."""
    import importlib.metadata

    from foundation.hardware.versions import software_versions

    try:
        farm_version = importlib.metadata.version("tvm-farm")
    except importlib.metadata.PackageNotFoundError:
        farm_version = "unknown (not installed: run scripts/setup)"
    found = software_versions("cuda")
    ffi = f" (tvm-ffi {found['tvm_ffi']})" if "tvm_ffi" in found else ""
    lines = [f"farm    {farm_version}", f"TVM     {found.get('tvm', 'unknown')}{ffi}",
             f"LLVM    {found.get('llvm', 'not found in TVM')}"]
    cuda = [f"{what} {found[key]}" for key, what in (("cuda_build", "TVM built with"), ("cuda_runtime", "runtime"),
                                                       ("nvcc", "nvcc"), ("nvidia_driver", "driver")) if key in found]
    if cuda:
        lines.append(f"CUDA    {', '.join(cuda)}")
    lines.append(f"Python  {found.get('python')}")
    return "\n".join(lines) + "\n"


@app.command()
@coordinator_options()
def jobs(
    limit: int = env_option(20, "--limit", command="jobs", min=1, metavar="N", help="How many jobs to list."),
    state: list[str] | None = env_option(None, "--state", command="jobs", metavar="STATE",
                                         help="Only jobs in this state (queued, running, building, validating, "
                                              "succeeded, failed, cancelled); repeat for several."),
    model: str | None = env_option(None, "--model", command="jobs", metavar="NAME",
                                   help="Only jobs of the model of this name (a zoo name, or an ONNX file's)."),
    registry: str | None = REGISTRY_OPTION,
    coordinator: Coordinator = None,
    json_output: bool = JSON_OPTION,
) -> None:
    """List recent jobs (of the coordinator, or of the registry), newest first.

    Without --coordinator, a job whose process died is marked failed first ("runner died").
    """
    from foundation.domain.jobs import job_states
    from foundation.domain.request_limits import LIST_LIMIT, MAX_ID_LENGTH, check_number, check_text

    check_number("--limit", limit, LIST_LIMIT)
    states = [s.value for s in job_states(state or [])]
    model = model or None  # a blank FARM_JOBS_MODEL: every model
    if model is not None:
        check_text("--model", model, MAX_ID_LENGTH)
    if coordinator.address:
        from farm.cli.cluster import remote_jobs

        return remote_jobs(coordinator.client(), limit, json_output, states, model)
    from farm.cli.views import JOB_COLUMNS, jobs_described, registry_job_row
    from farm.registry_jobs import RegistryJobs
    from foundation.registry.engine import RegistryMissing

    try:
        registry_jobs = RegistryJobs.open(registry)
    except RegistryMissing:
        if registry is not None:  # named, and not there: say so
            raise
        # A fresh box: no registry yet (the first `farm submit` makes it), so no jobs.
        if json_output:
            emit_json([])
        else:
            print_table(JOB_COLUMNS, [], empty="no jobs yet: `farm submit` runs one")
        return
    store = registry_jobs.store
    rows = registry_jobs.list(limit, states, model)
    if json_output:
        emit_json([registry_jobs.document(j) for j in rows])
        return
    models = {m.id: m for m in store.list_models()}
    print_table(JOB_COLUMNS, [registry_job_row(j, models.get(j.model_id)) for j in rows],
                empty=f"no {jobs_described(states, model)} in the registry at {store.url}")
