"""A long TVM log through `farm registry import`: wall time, peak memory (RSS) and records a second.

    .venv/bin/python bench/tvm_log_import.py [--records 100000] [--log DIR] [--out FILE.json]

Writes a JSONDatabase work_dir of --records distinct tuning records of one ResNet-18 3x3
convolution, as a long MetaSchedule run leaves one (every record a design-space trace of
MetaSchedule's own with other tile sizes, measured on this box's llvm target, about 2 KB a line),
then imports it with `farm registry import` into a fresh SQLite registry, in a process of its
own, and reports that process's wall time and peak RSS (the kernel's high-water mark, from
wait4). --log keeps the generated log in DIR and reuses it on the next run (100,000 records take
a few minutes to write). The import's own progress lines go to stderr as it runs.

Run it on a quiet box: the import replays every record's trace, so the figure is CPU-bound.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FARM = str(Path(sys.executable).with_name("farm"))
RECORD_FILE = "database_tuning_record.json"


def write_log(work_dir: Path, records: int) -> None:
    """``records`` distinct records of one convolution in a JSONDatabase at ``work_dir``."""
    template = _template_record(work_dir)
    index, (trace, _run_secs, target, args_info) = json.loads(template)
    tiles = _tile_choices(trace)
    combinations = 1
    for choices in tiles.values():
        combinations *= len(choices)
    if records > combinations:
        sys.exit(f"the convolution has {combinations:,} tilings, fewer than --records {records:,}")
    with (work_dir / RECORD_FILE).open("w") as out:
        for i, picked in enumerate(itertools.islice(_tilings(tiles), records)):
            decisions = [[at, picked.get(at, decision)] for at, decision in trace[1]]
            run_secs = [round(1e-3 * (1 + (i * 7919) % 1000 / 1000), 9)]
            out.write(json.dumps([index, [[trace[0], decisions], run_secs, target, args_info]],
                                 separators=(",", ":")) + "\n")


def _template_record(work_dir: Path) -> str:
    """One record of the convolution's first design space, written by TVM's own JSONDatabase."""
    import tvm
    from tvm import te, topi
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord

    from foundation.hardware.fingerprint import local_fingerprint
    from foundation.hardware.targets import canonical_target, to_tvm_target

    data = te.placeholder((1, 64, 56, 56), name="data")
    weight = te.placeholder((64, 64, 3, 3), name="weight")
    conv = topi.nn.conv2d_nchw(data, weight, stride=1, padding=1, dilation=1)
    mod = tvm.IRModule({"main": te.create_prim_func([data, weight, conv])})
    target = to_tvm_target(canonical_target("llvm", local_fingerprint("llvm")))
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", task_name="conv2d",
                             num_threads=1)
    space = context.generate_design_space()[0]
    work_dir.mkdir(parents=True, exist_ok=True)
    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    workload = database.commit_workload(mod)
    database.commit_tuning_record(
        TuningRecord(space.trace, workload, [1e-3], target, ArgInfo.from_prim_func(mod["main"])))
    return (work_dir / RECORD_FILE).read_text().splitlines()[0]


def _tile_choices(trace: list) -> dict[int, list[list[int]]]:
    """For each SamplePerfectTile of the trace (by instruction index), every perfect tiling of its
    loop (the product of the decision MetaSchedule sampled) into as many factors, innermost capped."""
    instructions, decisions = trace
    choices = {}
    for at, decision in decisions:
        kind, _inputs, attrs, _outputs = instructions[at]
        if kind != "SamplePerfectTile":
            continue
        parts, innermost_cap = int(attrs[0]), int(attrs[1])
        extent = 1
        for factor in decision:
            extent *= int(factor)
        choices[at] = [tiling for tiling in _factorizations(extent, parts)
                       if innermost_cap <= 0 or tiling[-1] <= innermost_cap]
    return choices


def _factorizations(extent: int, parts: int) -> list[list[int]]:
    if parts == 1:
        return [[extent]]
    return [[factor, *rest] for factor in range(1, extent + 1) if extent % factor == 0
            for rest in _factorizations(extent // factor, parts - 1)]


def _tilings(tiles: dict[int, list[list[int]]]):
    """Every combination of the loops' tilings, the innermost loops' changing first."""
    positions = sorted(tiles)
    for combination in itertools.product(*(tiles[at] for at in positions)):
        yield dict(zip(positions, combination, strict=True))


def import_log(log: Path, scratch: Path) -> tuple[float, int, str, str]:
    """`farm registry import` of ``log`` into a fresh registry: (wall seconds, peak RSS in bytes,
    its stdout, and the import's last progress line)."""
    env = {**os.environ, "FARM_HOME": str(scratch / "home")}
    env.pop("FARM_REGISTRY", None)
    command = [FARM, "registry", "import", str(log), "--registry", f"sqlite:///{scratch / 'registry.db'}"]
    begin = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    last_line = ""
    for line in process.stderr:  # its progress, shown as it comes
        sys.stderr.write(line)
        last_line = line.strip() or last_line
    stdout = process.stdout.read()
    _pid, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - begin
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        sys.exit(f"farm registry import failed (exit {process.returncode}): {last_line}")
    return wall, usage.ru_maxrss * 1024, stdout.strip(), last_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--log", type=Path, help="keep the generated log here; reused when it holds --records")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here too")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="farm-log-import-") as scratch:
        log = args.log or Path(scratch) / "log"
        record_file = log / RECORD_FILE
        generated = None
        if not (record_file.is_file() and sum(1 for _ in record_file.open()) == args.records):
            for name in ("database_workload.json", RECORD_FILE):
                (log / name).unlink(missing_ok=True)
            begin = time.perf_counter()
            write_log(log, args.records)
            generated = time.perf_counter() - begin
        size = record_file.stat().st_size
        wall, peak, stdout, _last = import_log(log, Path(scratch))

    figures = {
        "records": args.records, "log_bytes": size, "bytes_per_record": round(size / args.records),
        "import_seconds": round(wall, 1), "records_per_second": round(args.records / wall),
        "peak_rss_bytes": peak, "generated_seconds": None if generated is None else round(generated, 1),
        "summary": stdout, "python": platform.python_version(), "machine": platform.machine(),
        "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "command": "bench/tvm_log_import.py " + " ".join(sys.argv[1:]),
    }
    print(f"{args.records:,} records, {size / 1e6:.0f} MB log: imported in {wall:.1f} s "
          f"({args.records / wall:,.0f} records/s), peak RSS {peak / 2**20:.0f} MiB")
    print(f"  {stdout}")
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    from _child_signals import pass_signals_to_children

    pass_signals_to_children()
    main()
