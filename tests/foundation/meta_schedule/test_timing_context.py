"""CPU candidates timed in the cache state their kernel meets in the model (FARM_TIMING_CONTEXT): the
setting, each task's weights read from its TIR, the preprocs that flush exactly those, and real
MetaSchedule tuning timing each task in the context `auto` chose, locally and through a farm RPC server."""

from __future__ import annotations

import pytest

from foundation.config import CPU_CACHE_FLUSH_ENV, MIN_REPEAT_MS_ENV, TIMING_CONTEXT_ENV
from foundation.domain.timing_context import TimingContext
from foundation.errors import BadInput
from foundation.hardware import cache_state
from foundation.meta_schedule.measure import CACHE_FLUSH_REPEATS, MeasureSettings, RPCMeasure, WorkerPools
from foundation.meta_schedule.timing_context import (
    ContextEvaluator,
    buffer_roles,
    hardware_timing_context,
    timing_context_here,
    timing_context_setting,
)

from support.tvm_records import build_and_time, lean_cpu_target, matmul_module, mlp_tiny_tasks

HOST = "127.0.0.1"
KEY = "timing-context-test"


def test_the_setting_is_the_hardwares_unless_the_environment_says_otherwise(monkeypatch):
    monkeypatch.delenv(TIMING_CONTEXT_ENV, raising=False)
    monkeypatch.delenv(CPU_CACHE_FLUSH_ENV, raising=False)
    assert timing_context_setting() is None and MeasureSettings().timing_context is None  # decided as a run starts
    monkeypatch.setenv(CPU_CACHE_FLUSH_ENV, "1")  # the older spelling of `flushed`
    assert MeasureSettings().timing_context is TimingContext.FLUSHED
    monkeypatch.setenv(TIMING_CONTEXT_ENV, "auto")  # the new one wins
    assert MeasureSettings().timing_context is TimingContext.AUTO
    assert MeasureSettings(timing_context="weights").timing_context is TimingContext.WEIGHTS  # so does an argument
    monkeypatch.setenv(TIMING_CONTEXT_ENV, "sometimes")
    with pytest.raises(BadInput, match="FARM_TIMING_CONTEXT='sometimes' is not a timing context"):
        MeasureSettings()


def test_a_flushing_context_times_one_call_a_repeat_and_only_flushed_asks_tvm_to_flush(monkeypatch):
    monkeypatch.delenv(MIN_REPEAT_MS_ENV, raising=False)
    settings = MeasureSettings(timing_context=TimingContext.AUTO)
    for context, tvm_flush in ((TimingContext.WEIGHTS, False), (TimingContext.PRODUCER, False),
                               (TimingContext.FLUSHED, True)):
        config = settings.evaluator_config("llvm", context)
        assert (config.number, config.repeat, config.min_repeat_ms, config.enable_cpu_cache_flush) == (
            1, CACHE_FLUSH_REPEATS, 0, tvm_flush)
    warm = settings.evaluator_config("llvm")  # auto's base, and a warm task's
    assert (warm.number, warm.min_repeat_ms, warm.enable_cpu_cache_flush) == (3, 40, False)
    assert not settings.evaluator_config("cuda", TimingContext.WEIGHTS).enable_cpu_cache_flush


@pytest.fixture(scope="module")
def target():
    return lean_cpu_target()


@pytest.fixture(scope="module")
def mlp_tasks(target):
    return mlp_tiny_tasks(target)


def test_a_prepacked_tasks_weights_are_the_buffers_it_marks_layout_free(mlp_tasks):
    dense = [t for t in mlp_tasks if "matmul" in t.name]
    assert len(dense) == 2
    for task in dense:
        func = task.mod["main"]
        roles = buffer_roles(task.mod)
        assert roles.weights == tuple(int(i) for i in func.attrs["layout_free_buffers"]) and roles.weights
        assert roles.activations == (0,) and roles.outputs == (len(func.params) - 1,)
    assert sorted(buffer_roles(t.mod).weight_bytes for t in dense) == [10 * 128 * 4 + 10 * 4, 128 * 64 * 4 + 128 * 4]


def test_a_plain_tasks_weights_are_its_inputs_but_the_first():
    roles = buffer_roles(matmul_module(16))
    assert (roles.weights, roles.activations, roles.outputs) == ((1,), (0,), (2,))


@pytest.fixture
def three_shapes(target):
    """A compiled matmul whose arguments tell apart by shape: A (8, 16), B (16, 32), C (8, 32)."""
    import numpy as np
    import tvm
    from tvm import te

    a, b = te.placeholder((8, 16), name="A"), te.placeholder((16, 32), name="B")
    k = te.reduce_axis((0, 16), name="k")
    c = te.compute((8, 32), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    rt_mod = tvm.compile(tvm.IRModule({"main": te.create_prim_func([a, b, c])}), target=target).mod
    device = tvm.cpu()
    args = [tvm.runtime.tensor(np.ones(shape, "float32"), device) for shape in ((8, 16), (16, 32), (8, 32))]
    return rt_mod, device, args


def test_the_weights_context_flushes_only_the_weights_before_each_call(monkeypatch, three_shapes):
    from tvm.s_tir import meta_schedule as ms

    rt_mod, device, args = three_shapes
    flushed, read = [], []
    monkeypatch.setattr(cache_state, "flush_tensors", lambda ts: flushed.append([tuple(t.shape) for t in ts]))
    monkeypatch.setattr(cache_state, "read_back", lambda ts: read.append([tuple(t.shape) for t in ts]))
    costs = ContextEvaluator(TimingContext.WEIGHTS, (1,), (0,), repeats=4)(rt_mod, device,
                                                                         ms.runner.EvaluatorConfig(), [args])
    assert len(costs) == 4 and all(c > 0 for c in costs)
    assert flushed == [[(16, 32)]] * 4 and read == []
    flushed.clear()
    costs = ContextEvaluator(TimingContext.PRODUCER, (1,), (0,), repeats=3)(rt_mod, device,
                                                                          ms.runner.EvaluatorConfig(), [args])
    assert len(costs) == 3
    assert flushed == [[(8, 16), (16, 32), (8, 32)]] * 3 and read == [[(8, 16)]] * 3


def test_the_l2_evicted_context_streams_its_buffer_and_reads_the_activations_back_before_each_call(monkeypatch,
                                                                                                   three_shapes):
    from tvm.s_tir import meta_schedule as ms

    rt_mod, device, args = three_shapes
    evicted, read, flushed = [], [], []
    monkeypatch.setattr(cache_state, "evict_l2", lambda: evicted.append(cache_state._eviction[0].nbytes))
    monkeypatch.setattr(cache_state, "read_back", lambda ts: read.append([tuple(t.shape) for t in ts]))
    monkeypatch.setattr(cache_state, "flush_tensors", lambda ts: flushed.append(ts))
    costs = ContextEvaluator(TimingContext.L2_EVICTED, (1,), (0,), repeats=3, eviction_bytes=64 * 1024)(
        rt_mod, device, ms.runner.EvaluatorConfig(), [args])
    assert len(costs) == 3 and all(c > 0 for c in costs)
    assert evicted == [64 * 1024] * 3 and read == [[(8, 16)]] * 3 and flushed == []  # nothing clflushed


def test_the_preprocs_flush_and_read_back_for_real(three_shapes):
    from tvm.s_tir import meta_schedule as ms

    rt_mod, device, args = three_shapes
    for context in (TimingContext.WEIGHTS, TimingContext.PRODUCER, TimingContext.L2_EVICTED):
        costs = ContextEvaluator(context, (1,), (0,), repeats=2, eviction_bytes=4 * 2**20)(
            rt_mod, device, ms.runner.EvaluatorConfig(), [args])
        assert len(costs) == 2 and all(c > 0 for c in costs)
    assert cache_state._eviction[0].nbytes == 4 * 2**20 and float(cache_state._eviction[0].sum()) == 2**19


def records_run_secs(database, mod) -> list[int]:
    """How many timings each record of ``mod`` holds."""
    return [len(r.run_secs) for r in database.get_top_k(database.commit_workload(mod), 100)]


def test_auto_times_a_task_whose_weights_outgrow_the_l2_after_a_flush_and_the_others_warm(mlp_tasks, target,
                                                                                           tmp_path):
    from tvm.s_tir import meta_schedule as ms

    from foundation.meta_schedule import tuner

    dense = [t for t in mlp_tasks if "matmul" in t.name]
    large, small = sorted(dense, key=lambda t: -buffer_roles(t.mod).weight_bytes)
    database = ms.database.MemoryDatabase()
    # 16 KiB: the first layer's 32 KiB of weights outgrow it, the second's 5 KiB fit.
    settings = MeasureSettings(timing_context=TimingContext.AUTO, l2_kib=16, min_repeat_ms=5)
    with WorkerPools(settings) as pools:
        report = tuner.tune([large, small], target, database, tuner.TuningBudget(4, 2, 2), tmp_path, pools=pools,
                            seed=1)
        assert pools.timings is None  # only while the run is in progress
    assert report.trials > 0
    assert set(records_run_secs(database, large.mod)) == {CACHE_FLUSH_REPEATS}
    assert set(records_run_secs(database, small.mod)) == {1}


def write_pack_choosing(directory, fingerprint_id: str, context: TimingContext):
    """A pack in ``directory`` for ``fingerprint_id`` whose header carries ``context`` as its A/B's choice."""
    from foundation.domain.timing_context import choose_hardware_timing
    from foundation.registry.packs import in_memory_registry, write_pack
    from foundation.registry.shipped_packs import TIMING_CONTEXT_KEY

    directory.mkdir(exist_ok=True)
    chosen = choose_hardware_timing(context, (0.8, 0.85, 0.9), ["ab.json"])
    store = in_memory_registry()
    try:
        write_pack(store, directory / f"{fingerprint_id}.farmpack",
                   {"fingerprint": fingerprint_id, TIMING_CONTEXT_KEY: chosen.to_json()})
    finally:
        store.dispose()


@pytest.fixture
def packs_here(monkeypatch, tmp_path):
    """A directory of shipped packs (FARM_SHIPPED_PACKS_DIR), with nothing in the environment asking for a
    context; this box's fingerprint id."""
    from foundation.config import SHIPPED_PACKS_DIR_ENV, SHIPPED_PACKS_ENV
    from foundation.hardware.fingerprint import local_fingerprint

    for name in (TIMING_CONTEXT_ENV, CPU_CACHE_FLUSH_ENV, SHIPPED_PACKS_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(SHIPPED_PACKS_DIR_ENV, str(tmp_path / "packs"))
    (tmp_path / "packs").mkdir()
    return tmp_path / "packs", local_fingerprint("llvm").id


def test_a_box_times_in_the_context_its_packs_ab_chose_unless_asked_otherwise(monkeypatch, packs_here):
    from foundation.config import SHIPPED_PACKS_ENV

    packs, here = packs_here
    chosen = hardware_timing_context()
    assert chosen.context is TimingContext.WARM and f"no pack of {here} chose one" in chosen.why
    write_pack_choosing(packs, "cpu-000000000000", TimingContext.PRODUCER)  # another kind's
    write_pack_choosing(packs, here, TimingContext.AUTO)
    chosen = timing_context_here()
    assert chosen.context is TimingContext.AUTO
    assert chosen.why == f"the pack of {here} chose auto: auto/warm 0.850 (median of 3 A/B tunes, 3 won)"
    assert hardware_timing_context("cpu-000000000000").context is TimingContext.PRODUCER
    (packs / "broken.farmpack").write_bytes(b"not a pack")  # a damaged pack is not this box's choice
    assert timing_context_here().context is TimingContext.AUTO
    monkeypatch.setenv(TIMING_CONTEXT_ENV, "warm")  # asked for: the environment wins
    assert timing_context_here() == type(chosen)(TimingContext.WARM, "asked for (FARM_TIMING_CONTEXT)")
    monkeypatch.delenv(TIMING_CONTEXT_ENV)
    monkeypatch.setenv(SHIPPED_PACKS_ENV, "0")  # nothing of the shipped packs
    assert timing_context_here().context is TimingContext.WARM


def test_a_tuning_run_times_each_task_as_the_packs_choice_says(mlp_tasks, target, tmp_path, packs_here):
    from tvm.s_tir import meta_schedule as ms

    from foundation.meta_schedule import tuner

    packs, here = packs_here
    write_pack_choosing(packs, here, TimingContext.AUTO)
    dense = [t for t in mlp_tasks if "matmul" in t.name]
    large, small = sorted(dense, key=lambda t: -buffer_roles(t.mod).weight_bytes)
    database = ms.database.MemoryDatabase()
    settings = MeasureSettings(l2_kib=16, min_repeat_ms=5)  # nothing asked: the pack's auto, by a 16 KiB L2
    assert settings.timing_context is None
    with WorkerPools(settings) as pools:
        report = tuner.tune([large, small], target, database, tuner.TuningBudget(4, 2, 2), tmp_path, pools=pools,
                            seed=1)
    assert report.trials > 0
    assert set(records_run_secs(database, large.mod)) == {CACHE_FLUSH_REPEATS}
    assert set(records_run_secs(database, small.mod)) == {1}
    with WorkerPools(MeasureSettings(l2_kib=16, fingerprint_id="cpu-000000000000")) as pools:  # no pack of it
        assert pools.plan_timings([large.mod], "llvm") is None


@pytest.mark.slow
@pytest.mark.parametrize("context", [TimingContext.WEIGHTS, TimingContext.PRODUCER, TimingContext.L2_EVICTED])
def test_a_context_through_the_tracker_uses_the_farm_servers_preprocs(target, context):
    import tvm

    from agent.rpc_server import SupervisedRPCServer
    from foundation.meta_schedule.progress import LiveProgress, TaskProgress
    from foundation.rpc.tracker import TrackerProcess

    mod = matmul_module(128)
    with TrackerProcess(host=HOST, port=0) as tracker:
        with SupervisedRPCServer(HOST, tracker.port, KEY, host=HOST, port=0, check_interval=1.0,
                                 restart_grace=4.0, start_timeout=20.0) as server:
            server.wait_until_serving(timeout=30)
            session = tvm.rpc.connect_tracker(HOST, tracker.port).request(KEY, session_timeout=30)
            session.get_function(cache_state.SET_ROLES)(1, cache_state.SEPARATOR, 0)  # the farm's server has it
            session.get_function(cache_state.SET_EVICTION)(2**20)  # and l2-evicted's
            del session
            settings = MeasureSettings(timing_context=context, rpc=RPCMeasure(HOST, tracker.port, KEY), l2_kib=64)
            with WorkerPools(settings) as pools:
                builder, runner = pools.get("llvm")
                timings = pools.plan_timings([mod], "llvm")
                assert [t.context for t in timings] == [context] and timings[0].roles.weights == (1,)
                pools.live = LiveProgress([TaskProgress(0, "mm", 1, 0.0, 1)], None)
                pools.live.picked(0)
                run_secs, _ = build_and_time(builder, runner, mod, target)
    assert len(run_secs) == CACHE_FLUSH_REPEATS and all(s > 0 for s in run_secs), run_secs


def test_farm_fingerprint_says_which_context_this_box_times_in_and_why(packs_here, farm_home):
    import json

    from foundation.config import SHIPPED_PACKS_DIR_ENV

    from support.farm_inprocess import run_farm_inprocess

    packs, here = packs_here
    write_pack_choosing(packs, here, TimingContext.AUTO)
    shown = run_farm_inprocess("fingerprint", "--json", home=farm_home, env={SHIPPED_PACKS_DIR_ENV: str(packs)})
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["timing_context"] == {
        "context": "auto", "why": f"the pack of {here} chose auto: auto/warm 0.850 (median of 3 A/B tunes, 3 won)"}
    text = run_farm_inprocess("fingerprint", home=farm_home, env={TIMING_CONTEXT_ENV: "weights"})
    assert "timing       weights: asked for (FARM_TIMING_CONTEXT)" in text.stdout
