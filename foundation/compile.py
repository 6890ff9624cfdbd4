"""Lower a model for a target: the tuning tasks it yields, and libraries built from records.

The same lowering feeds both task extraction and the final build, so the workloads that
MetaSchedule tuned are structurally identical to the ones the build looks up. With
``prepack`` (CPU targets, foundation.domain.weights_layout) the lowering marks the weight
buffers layout-free, as TVM's `static_shape_tuning_pipeline(cpu_weight_prepack=True)` does,
so tuning may rewrite their layout; the build then lifts those rewrites into a
`main_transform_params` function the loader runs once on plain weights.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

from foundation.processes.scratch_space import check_scratch_space

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.models.loaded import LoadedModel


@dataclass(frozen=True)
class TuningTask:
    """One tunable TIR function of a model, with how often the model calls it."""

    name: str
    weight: int
    mod: "tvm.IRModule"
    flop: float


def lower_for_tuning(mod: "tvm.IRModule", target: "tvm.target.Target", *, prepack: bool = False,
                     block_activations: bool = False) -> "tvm.IRModule":
    """Legalize and fuse a Relax module into the TIR functions MetaSchedule tunes.

    With ``prepack`` the TIR functions' weight buffers are marked layout-free
    (`layout_free_buffers`), which MetaSchedule's RewriteLayout postprocessor acts on. Which
    of `main`'s parameters are weights is told by its `num_input` attribute. With
    ``block_activations`` (prepacked weights only) the convolutions' activations are NCHW{b}c
    from the first convolution to the last (foundation.blocked_activations); the model's inputs,
    outputs and weights stay as they are. The prepacked forms also fold a transposed activation
    into the matmul that reads it (foundation.transposed_matmul); the plain form is TVM's own
    lowering, whose workloads users' TVM logs hold.
    """
    import tvm
    from tvm import relax

    _refuse_prepack_off_cpu(prepack, target)
    if block_activations and not prepack:
        raise ValueError("blocked activations come with prepacked weights")
    passes = []
    if block_activations:
        from foundation.blocked_activations import block_for, blocked_activations

        passes.append(blocked_activations(block_for(mod, target)))
    passes += [
        relax.transform.DecomposeOpsForInference(),
        relax.transform.CanonicalizeBindings(),
    ]
    if prepack:
        from foundation.transposed_matmul import transposed_matmuls_folded

        passes.append(transposed_matmuls_folded)
    passes.append(relax.pipeline.zero_pipeline())
    if prepack:
        passes.append(relax.transform.AttachAttrLayoutFreeBuffers())
    with target:
        return tvm.transform.Sequential(passes)(mod)


def extract_tuning_tasks(model: "LoadedModel", target: "tvm.target.Target", *,
                         prepack: bool = False, block_activations: bool = False) -> list[TuningTask]:
    """The model's tuning tasks for ``target``, in MetaSchedule's order."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.analysis import estimate_tir_flops

    lowered = lowered_for_tasks(model, target, prepack=prepack, block_activations=block_activations)
    extracted = ms.relax_integration.extract_tasks(lowered, target)
    tasks = []
    for task in extracted:
        if task.mod.attrs is not None and task.mod.attrs.get("tirx.is_scheduled", False):
            continue  # already scheduled by hand: MetaSchedule skips these too
        if block_activations and _lifted_at_load(task):
            continue
        tasks.append(
            TuningTask(
                name=task.task_name,
                weight=int(task.weight),
                mod=task.dispatched[0],
                flop=float(estimate_tir_flops(task.dispatched[0])),
            )
        )
    return tasks


def lowered_for_tasks(model: "LoadedModel", target: "tvm.target.Target", *, prepack: bool = False,
                      block_activations: bool = False) -> "tvm.IRModule":
    """The lowered module `extract_tuning_tasks` reads the model's tasks from: each of its TIR
    functions is a kernel of the built library, under the same name."""
    return lower_for_tuning(_weights_marked(model) if prepack else model.mod, target, prepack=prepack,
                            block_activations=block_activations)


def _lifted_at_load(task) -> bool:
    """A task of the blocked form that only reshapes a weight vector: left out of tuning."""
    from foundation.blocked_activations import is_vector_reshape

    return task.task_name.startswith("reshape") and is_vector_reshape(task.dispatched[0]["main"])


def build_library(model: "LoadedModel", target: "tvm.target.Target", database=None, *,
                  prepack: bool = False, block_activations: bool = False, before_compile=None) -> bytes:
    """Compile the model and return the exported shared library's bytes.

    With ``database`` the best record of every tuned workload is applied; without it the
    build is TVM's untuned default, which the farm uses as the numerical reference. Weights
    stay function inputs, so the library carries none. With ``prepack`` the layout rewrites
    the records made are split out of the kernels and lifted into `main_transform_params`
    (weights in, prepacked weights out), and `main` takes the prepacked weights.
    ``before_compile`` (IRModule -> IRModule) rewrites the lowered module last, for experiments
    on the farm's own build (bench/serial_small_kernels.py).
    """
    import tvm
    from tvm import relax

    if target.kind.name == "llvm":
        from foundation.hardware.tvm_startup import use_farm_llvm_rules

        use_farm_llvm_rules()  # as the candidates were built (foundation.hardware.tvm_startup)
    lowered = lower_for_tuning(_weights_marked(model) if prepack else model.mod, target, prepack=prepack,
                               block_activations=block_activations)
    if database is not None:
        with target, database:
            lowered = relax.transform.MetaScheduleApplyDatabase()(lowered)
    if prepack:
        with target:
            lowered = tvm.transform.Sequential([
                relax.transform.SplitLayoutRewritePreproc(),
                relax.transform.LiftTransformParams(),
                relax.transform.FoldConstant(),
            ])(lowered)
    if target.kind.name != "llvm":
        lowered = _schedule_the_rest_for_gpu(lowered, target)
    if before_compile is not None:
        lowered = before_compile(lowered)
    executable = tvm.compile(lowered, target=target)
    check_scratch_space("building the library")  # LLVM ends the process on a full disk, raising nothing
    with tempfile.TemporaryDirectory(prefix="farm-build-") as tmp:
        path = os.path.join(tmp, "model.so")
        executable.export_library(path)
        with open(path, "rb") as f:
            return f.read()


def _weights_marked(model: "LoadedModel") -> "tvm.IRModule":
    """The model's module with `main` saying how many of its parameters are inputs (the rest
    are weights), which the layout passes and LiftTransformParams read."""
    main = model.mod["main"]
    if main.attrs is not None and int(main.attrs.get("num_input", -1)) == len(model.inputs):
        return model.mod
    mod = model.mod.clone()
    mod["main"] = main.with_attr("num_input", len(model.inputs))
    return mod


def _refuse_prepack_off_cpu(prepack: bool, target: "tvm.target.Target") -> None:
    if prepack and target.kind.name != "llvm":
        raise ValueError(f"weights are prepacked only for llvm targets, not {target.kind.name}")


def _schedule_the_rest_for_gpu(mod: "tvm.IRModule", target: "tvm.target.Target") -> "tvm.IRModule":
    """Give every function without a tuned schedule dlight's default GPU schedule.

    GPU kernels must bind threads to compile at all; CPU code runs unscheduled. dlight skips
    functions MetaScheduleApplyDatabase already marked as scheduled.
    """
    from tvm.s_tir import dlight

    with target:
        return dlight.ApplyDefaultSchedule(
            dlight.gpu.Matmul(),
            dlight.gpu.GEMV(),
            dlight.gpu.Reduction(),
            dlight.gpu.GeneralReduction(),
            dlight.gpu.Fallback(),
        )(mod)


def weights_bound(weights: "list[tvm.runtime.Tensor]"):
    """A ``before_compile`` (build_library) that binds ``weights``, in the form the lowered `main`
    takes them (prepacked ones rearranged already), into `main` as constants: the library's `main`
    then takes the model's inputs only. `main_transform_params` is dropped: nothing is left for
    it to rearrange. The weights are bound after the records are applied, not before lowering:
    constants there would be folded into the kernels and change the workloads the records match."""
    import tvm
    from tvm import relax

    from foundation.domain.weights_layout import TRANSFORM_PARAMS_FUNCTION

    def bind(mod: "tvm.IRModule") -> "tvm.IRModule":
        params = list(mod["main"].params)
        if len(params) < len(weights):
            raise ValueError(f"main takes {len(params)} parameters, fewer than the {len(weights)} weights")
        taken = params[len(params) - len(weights):]
        for param, weight in zip(taken, weights):
            info = param.ty
            shape = [int(d) for d in info.shape]
            if shape != list(weight.shape) or info.dtype != str(weight.dtype):
                raise ValueError(f"main's parameter {param.name} is {info.dtype}{shape}, "
                                 f"the weight bound to it {weight.dtype}{list(weight.shape)}")
        mod = relax.transform.BindParams("main", dict(zip(taken, weights)))(mod)
        kept = {gv: f for gv, f in mod.functions.items() if gv.name_hint != TRANSFORM_PARAMS_FUNCTION}
        return tvm.IRModule(kept, attrs=mod.attrs)

    return bind
