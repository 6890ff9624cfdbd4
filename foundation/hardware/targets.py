"""What the user typed as a target, made into the one canonical target the registry keys on."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from foundation.errors import BadInput, FarmError
from foundation.hardware.isa_features import features_llvm_gives

if TYPE_CHECKING:
    import tvm

    from foundation.hardware.fingerprint import Fingerprint

TUNABLE_KINDS = ("llvm", "cuda")

# Which fingerprint kind describes the hardware of each target kind.
FINGERPRINT_KIND = {"llvm": "cpu", "cuda": "cuda"}

# TVM target kinds the farm recognizes but cannot tune yet: named in the error so that the
# user learns it is a farm limitation, not a typo.
UNTUNED_TVM_KINDS = ("rocm", "vulkan", "metal", "opencl", "webgpu", "hexagon", "nvptx", "c", "ext_dev")

# MetaSchedule refuses CUDA targets without these (checked with TVM 0.27: the CUDA space
# generator needs max_threads_per_block, VerifyGPUCode needs max_shared_memory_per_block).
# The values hold for every NVIDIA GPU since sm_20; 48 KiB is the per-block limit without
# the dynamic shared-memory opt-in, which TVM's generated kernels do not use.
CUDA_LIMITS = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 49152, "thread_warp_size": 32}

_EXAMPLE = '{"kind":"llvm","mcpu":"znver4"}'


# LLVM's spelling of the ISA features a CPU fingerprint keeps, where it differs from Linux's.


def parse_target_kind(user: str) -> str:
    """"llvm" or "cuda" for a target the farm can tune; FarmError for anything else."""
    return _parse(user)["kind"]


def parse_target(user: str) -> dict[str, Any]:
    """The user's target as a dict with a tunable kind, before a fingerprint fills it in."""
    return _parse(user)


def check_llvm_cpu(requested: dict, target: dict) -> None:
    """Refuse an ``mcpu`` the user gave that LLVM does not know, before any work.

    LLVM would fall back to a generic CPU, print an error for every function it compiles, and
    the records and the library would be stored under a name that means nothing. Only a user's
    mcpu is checked (and TVM imported for it): the fingerprint's comes from LLVM itself.
    """
    mcpu = requested.get("mcpu")
    if target["kind"] != "llvm" or not mcpu:
        return
    import difflib

    from tvm.target import Target, codegen

    triple = str(target.get("mtriple") or codegen.llvm_get_system_triple())
    if codegen.llvm_is_valid_cpu(str(mcpu), triple):
        return
    known = [str(c) for c in codegen.llvm_get_cpu_archlist(Target({"kind": "llvm", "mtriple": triple}))]
    close = difflib.get_close_matches(str(mcpu), known, n=3) or known[:3]
    raise BadInput(f"LLVM does not know the CPU {mcpu!r} (mcpu) for {triple}",
                   f"use one it knows, such as {', '.join(close)}; or leave mcpu out for this box's")


def check_runs_here(requested: dict, target: dict, fp: "Fingerprint") -> None:
    """Refuse to tune here for an ``mtriple`` of another architecture, or an ``mcpu``/``mattr``
    whose instructions this CPU lacks.

    Its candidates would be measured on this CPU and crash (illegal instructions), or worse,
    give timings of nothing. Agents of a fingerprint that has the features can tune it.
    """
    if target["kind"] != "llvm" or not ({"mcpu", "mattr", "mtriple"} & set(requested)):
        return
    here, wanted_arch = triple_arch(fp.details.get("llvm_triple", "")), triple_arch(str(target.get("mtriple", "")))
    if wanted_arch and here and wanted_arch != here:
        raise BadInput(f"code for {wanted_arch} (mtriple {target['mtriple']}) cannot run on this {here} CPU: "
                       "its candidates cannot be measured here",
                       f"tune it on a {wanted_arch} box: an agent there, with --coordinator")
    missing = sorted(codegen_features(target) - set(fp.details.get("features", [])))
    if missing:
        raise BadInput(
            f"this CPU ({fp.summary}) lacks {', '.join(missing)}, which code for "
            f"{json.dumps({k: v for k, v in target.items() if k in ('mcpu', 'mattr')})} uses: "
            "its candidates cannot be measured here",
            "tune it where they exist: an agent of such a fingerprint, with --coordinator; "
            "or leave mcpu/mattr out to tune for this CPU",
        )


def codegen_features(target: dict) -> set[str]:
    """The ISA features (a CPU fingerprint's spelling, foundation.hardware.isa_features.CODEGEN_FEATURES)
    that LLVM may use for the llvm ``target``: its mcpu's, with its mattr."""
    return features_llvm_gives(to_tvm_target(target))


def canonical_target(user: str, fp: "Fingerprint") -> dict:
    """The full target for this hardware: what the fingerprint implies, overridden by the user.

    Filling in mcpu/num-cores matters: a bare `llvm` target compiles for a generic x86-64 and
    one thread, so its records would not be the ones this box's users want.
    """
    return _canonical(_parse(user), fp)


def _canonical(given: dict[str, Any], fp: "Fingerprint") -> dict:
    """canonical_target of a target parsed already (``given`` is left as it was)."""
    given = dict(given)
    kind = given["kind"]
    if fp.kind != FINGERPRINT_KIND[kind]:
        raise FarmError(f"target {kind} needs a {FINGERPRINT_KIND[kind]} fingerprint, got {fp.kind} ({fp.id})",
                        "detect the fingerprint with fingerprint_for(target kind)")
    if kind == "llvm":
        return {**llvm_target(fp.details), **given}
    user_host = given.pop("host", None)
    host = {"kind": "llvm", **({"mtriple": fp.details["host_triple"]} if fp.details.get("host_triple") else {})}
    if isinstance(user_host, str):
        user_host = _parse(user_host)
    if user_host is not None:
        host = {**host, **user_host}
    major, minor = str(fp.details["compute_capability"]).split(".")
    return {"kind": "cuda", "arch": f"sm_{major}{minor}", **CUDA_LIMITS, **given, "host": host}


def measurable_target(user: str, fp: "Fingerprint") -> dict:
    """canonical_target, refused (BadInput) where agents of ``fp`` cannot measure it: an mcpu
    LLVM does not know (check_llvm_cpu), or code their CPU cannot run (check_runs_here). What a
    coordinator tunes for a fingerprint; `farm submit` on its own box checks the same."""
    requested = _parse(user)
    target = _canonical(requested, fp)
    check_llvm_cpu(requested, target)
    check_runs_here(requested, target, fp)
    return target


def local_target(user_target: str, *, tuning_here: bool = False) -> tuple["Fingerprint", dict]:
    """This box's fingerprint for the target's kind, and the canonical target; BadInput for an mcpu LLVM does
    not know, and with ``tuning_here`` (`farm submit` tunes here) for code this CPU cannot run."""
    from foundation.hardware.fingerprint import local_fingerprint

    requested = parse_target(user_target)
    fingerprint = local_fingerprint(requested["kind"])
    target = _canonical(requested, fingerprint)
    check_llvm_cpu(requested, target)
    if tuning_here:
        check_runs_here(requested, target, fingerprint)
    return fingerprint, target


def unusable_fingerprint(fp: "Fingerprint", kind: str) -> str | None:
    """Why a stored fingerprint cannot give a ``kind`` target (its kind, or details it lacks), or None.

    A submit plans a job for every fingerprint with agents: one that cannot give a target is
    left out, so that no registration can fail another caller's submit.
    """
    try:
        target = canonical_target(kind, fp)
        _check_attributes(target_json(target), target)
    except FarmError as err:
        return err.problem
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        return f"its details do not give a {kind} target ({type(err).__name__}: {str(err)[:80]})"
    return _cpu_naming_problem(target)


# How LLVM spells a target triple (arch-vendor-os[-environment]) and a CPU name. A fingerprint's
# come from LLVM on the agent's box; one of another shape (a triple that names no architecture)
# crashed the coordinator's planning, on every restart. Checked without TVM: an agent registers
# before the coordinator has any reason to import it; whether LLVM takes a well-formed pair is
# asked where the job's TVM target is made (to_tvm_target).
_TRIPLE = re.compile(r"[A-Za-z0-9_.]+(-[A-Za-z0-9_.]+){2,3}")
_CPU_NAME = re.compile(r"[A-Za-z0-9_.+-]+")


def _cpu_naming_problem(target: dict) -> str | None:
    """Why ``target``'s CPU (a CUDA target's host) is named as LLVM never names one, or None."""
    cpu = target if target["kind"] == "llvm" else target.get("host", {})
    if not isinstance(cpu, dict):
        return None
    triple, mcpu = cpu.get("mtriple"), cpu.get("mcpu")
    if triple is not None and not _TRIPLE.fullmatch(str(triple)):
        return f"the triple {triple!r} is not one LLVM names (arch-vendor-os, such as x86_64-unknown-linux-gnu)"
    if mcpu is not None and not _CPU_NAME.fullmatch(str(mcpu)):
        return f"the CPU {mcpu!r} is not a name LLVM gives one (one word, such as znver4)"
    return None


def _llvm_refusal(config: dict) -> str | None:
    """Why LLVM here does not take the CPU and triple of ``config`` (an llvm target, or a CUDA
    target's host), or None: given one it does not, LLVM falls back to a generic CPU, or crashes."""
    from tvm.target import codegen

    triple = config.get("mtriple") if config.get("kind") == "llvm" else None
    if triple is None or codegen.llvm_is_valid_cpu(str(config.get("mcpu") or "generic"), str(triple)):
        return None
    return f"LLVM here does not take the CPU {config.get('mcpu')!r} with the triple {triple!r}"


def llvm_target(cpu_details: dict) -> dict:
    """The llvm target a CPU fingerprint's details imply."""
    return {
        "kind": "llvm",
        "mtriple": cpu_details["llvm_triple"],
        "mcpu": cpu_details["llvm_mcpu"],
        "num-cores": int(cpu_details["cores"]),
    }


def target_json(d: dict) -> str:
    """One spelling of a canonical target: it is a registry key, so it must never vary."""
    if not isinstance(d, dict) or "kind" not in d:
        raise FarmError(f"not a target: {d!r}", f"a target is a JSON object with a kind, such as {_EXAMPLE}")
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


def to_tvm_target(d: dict) -> "tvm.target.Target":
    """The TVM Target of a canonical target dict (imports TVM)."""
    from tvm.target import Target

    config = dict(d)
    host = config.pop("host", None)
    refusal = _llvm_refusal(config) or (_llvm_refusal(host) if isinstance(host, dict) else None)
    if refusal:
        raise FarmError(f"TVM cannot make the target {target_json(d)}: {refusal}",
                        "give an mcpu and mtriple LLVM knows (`farm fingerprint` shows this box's; an agent's "
                        "are what LLVM detected on it)")
    try:
        return Target(config, host=host) if host is not None else Target(config)
    except Exception as err:
        message = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise FarmError(f"TVM rejects the target {target_json(d)}: {message}",
                        "check the attribute names and values against TVM's target kinds") from None


def triple_arch(triple: str) -> str:
    """The architecture a target triple (or a bare `platform.machine()` name) names, one spelling each."""
    arch = triple.split("-", 1)[0].lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)


def _parse(user: str) -> dict[str, Any]:
    """The user's target as a dict with a tunable kind (other keys untouched)."""
    text = (user or "").strip()
    if text.startswith(("{", "[", '"')):
        try:
            parsed = json.loads(text)
            # What reads a target next (its checks, json.dumps) recurses too, per level: a target
            # is never deeper than a CUDA target's host's mattr, so anything far deeper is refused
            # here, as `farm registry import` refuses a line JSON's decoder cannot take.
            too_deep = _nesting(parsed) > _MAX_NESTING
        except json.JSONDecodeError as err:
            raise FarmError(f"unknown target {user!r}: malformed JSON ({err.msg} at column {err.colno})",
                            f"use llvm, cuda, or a TVM target JSON object such as {_EXAMPLE}") from None
        except RecursionError:
            too_deep = True
        if too_deep:
            shown = user if len(user) <= 60 else user[:60] + "…"
            raise BadInput(f"unknown target {shown!r}: not JSON the farm reads (nested too deeply)",
                           f"use llvm, cuda, or a TVM target JSON object such as {_EXAMPLE}")
        if not isinstance(parsed, dict) or not isinstance(parsed.get("kind"), str):
            what = "the JSON object has no \"kind\"" if isinstance(parsed, dict) else "not a JSON object"
            raise FarmError(f"unknown target {user!r}: {what}",
                            f"use llvm, cuda, or a TVM target JSON object such as {_EXAMPLE}")
        kind = parsed["kind"].strip().lower()
        parsed = {**parsed, "kind": kind}
    else:
        kind = text.lower()
        parsed = {"kind": kind}
    if kind in TUNABLE_KINDS:
        _check_attributes(user, parsed)
        return parsed
    if kind in UNTUNED_TVM_KINDS:
        raise FarmError(f"unknown target {user!r}: TVM knows the kind {kind!r} but the farm does not tune it yet",
                        "use llvm or cuda")
    if text.startswith(("llvm ", "cuda ")) or " -" in text:
        fix = f"TVM 0.27 dropped the command-line target form; write it as JSON, such as {_EXAMPLE}"
    elif kind in ("cpu", "x86", "x86_64", "arm", "aarch64"):
        fix = "CPU targets are called llvm in TVM: use llvm"
    elif kind in ("gpu", "nvidia"):
        fix = "NVIDIA GPU targets are called cuda: use cuda"
    else:
        fix = f"use llvm, cuda, or a TVM target JSON object such as {_EXAMPLE}"
    raise FarmError(f"unknown target {user!r}", fix)


# Deepest a target's JSON may nest: a CUDA target, its host, its mattr list is 3.
_MAX_NESTING = 16


def _nesting(value: Any) -> int:
    """How deep lists and objects nest in a parsed JSON ``value`` (a scalar is 0), without recursion."""
    deepest, level = 0, [(value, 0)]
    while level:
        item, depth = level.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth + 1)
        if deepest > _MAX_NESTING:
            break
        level.extend((child, depth + 1) for child in children)
    return deepest


# Target attributes TVM takes without a word whatever their value (num-cores -4 compiles, and
# would key records of its own), with the values that make sense: (type, smallest, largest).
_COUNT_ATTRIBUTES = {
    "num-cores": (1, 4096), "opt-level": (0, 3), "vector-width": (1, 4096),
    "max_threads_per_block": (1, 65536), "max_shared_memory_per_block": (1, 1 << 30),
    "thread_warp_size": (1, 1024), "max_num_threads": (1, 1 << 20), "registers_per_block": (1, 1 << 24),
    "max_function_args": (1, 1 << 16),
}
_TEXT_ATTRIBUTES = ("mcpu", "mtriple", "mabi", "arch", "model")

# The attributes TVM 0.27's target kinds take, and their types (TargetKind.options_from_name;
# tests/foundation/hardware/test_targets.py compares them with the installed TVM's). Known without
# importing TVM, so that `farm submit` and the coordinator refuse one TVM would reject before
# anything is written: TVM itself refused it only when the job had started.
_COMMON_OPTIONS = {
    "kind": "str", "keys": "Array<str>", "tag": "str", "device": "str", "model": "str", "libs": "Array<str>",
    "host": "target.Target", "from_device": "int", "target_device_type": "int",
}
TARGET_OPTIONS = {
    "llvm": {**_COMMON_OPTIONS, "mattr": "Array<str>", "mcpu": "str", "mtriple": "str", "mfloat-abi": "str",
             "mabi": "str", "num-cores": "int", "fast-math": "bool", "fast-math-nnan": "bool",
             "fast-math-ninf": "bool", "fast-math-nsz": "bool", "fast-math-arcp": "bool",
             "fast-math-contract": "bool", "fast-math-reassoc": "bool", "opt-level": "int",
             "cl-opt": "Array<str>", "jit": "str", "vector-width": "int"},
    "cuda": {**_COMMON_OPTIONS, "mcpu": "str", "arch": "str", "max_shared_memory_per_block": "int",
             "max_threads_per_block": "int", "thread_warp_size": "int", "registers_per_block": "int",
             "l2_cache_size_bytes": "int", "max_num_threads": "int"},
}
_OPTION_TYPES = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "Array<str>": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings"),
    "target.Target": (lambda v: isinstance(v, (str, dict)), "a target (a JSON object or its text)"),
}


def _check_attributes(user: str, parsed: dict[str, Any]) -> None:
    """Refuse attribute values no device has, in one line, before anything uses the target."""
    shown = user if len(user) <= 200 else user[:200] + "…"
    for name, (low, high) in _COUNT_ATTRIBUTES.items():
        if name not in parsed:
            continue
        value = parsed[name]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise BadInput(f"target attribute {name} must be an integer from {low} to {high}, got "
                           f"{json.dumps(value)[:40]} in {shown}",
                           f"fix or leave out {name} (the farm fills num-cores and mcpu in from the fingerprint)")
    for name in _TEXT_ATTRIBUTES:
        if name in parsed and (not isinstance(parsed[name], str) or not parsed[name].strip()):
            raise BadInput(f"target attribute {name} must be a non-empty string, got "
                           f"{json.dumps(parsed[name])[:40]} in {shown}", f"fix or leave out {name}")
    mattr = parsed.get("mattr")
    if mattr is not None and (not isinstance(mattr, list) or not all(isinstance(a, str) and a for a in mattr)):
        raise BadInput(f"target attribute mattr must be a list of strings such as [\"+avx2\"], got "
                       f"{json.dumps(mattr)[:40]} in {shown}", "fix or leave out mattr")
    # A CUDA target's host is a target too: its attributes are held to the same values (a host
    # given as text is parsed, and so checked, where canonical_target reads it).
    options = TARGET_OPTIONS.get(parsed.get("kind"), {})
    for name, value in parsed.items() if options else ():
        if name not in options:
            raise BadInput(f"target attribute {name!r} is not one TVM's {parsed['kind']} targets take, in {shown}",
                           f"use one of {', '.join(sorted(options))}")
        fits, what = _OPTION_TYPES[options[name]]
        if not fits(value):
            raise BadInput(f"target attribute {name} must be {what}, got {json.dumps(value)[:40]} in {shown}",
                           f"fix or leave out {name}")
    host = parsed.get("host")
    if isinstance(host, dict):
        _check_attributes(user, host)
    elif host is not None and not isinstance(host, str):
        raise BadInput(f"target attribute host must be a target (a JSON object or its text), got "
                       f"{json.dumps(host)[:40]} in {shown}", "fix or leave out host (the farm fills it in)")
