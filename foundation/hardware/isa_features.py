"""The ISA extensions a CPU fingerprint records, and which of them LLVM gives a CPU it compiles for.

Beside both the fingerprint (what this box has) and the targets (what a target compiles for), which
each ask the other's question: whether a CPU view's code runs here, whether a target's does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import tvm

# ISA extensions that change what LLVM may emit. Everything else in /proc/cpuinfo's flags
# (security mitigations, virtualization bits, ...) differs between otherwise identical boxes
# and would split their records for no reason.
X86_CODEGEN_FEATURES = frozenset({
    "sse4_2", "avx", "avx2", "fma", "f16c",
    "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl",
    "avx512_vnni", "avx512_bf16", "avx512_fp16",
    "amx_tile", "amx_int8", "amx_bf16", "avx_vnni",
})
ARM_CODEGEN_FEATURES = frozenset({"asimd", "asimddp", "i8mm", "sve", "sve2", "bf16", "fphp"})
CODEGEN_FEATURES = X86_CODEGEN_FEATURES | ARM_CODEGEN_FEATURES

# LLVM's names of those extensions, where they differ from /proc/cpuinfo's.
_LLVM_FEATURE_NAMES = {
    "sse4.2": "sse4_2", "avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16",
    "avxvnni": "avx_vnni", "amx-tile": "amx_tile", "amx-int8": "amx_int8", "amx-bf16": "amx_bf16",
    "neon": "asimd", "dotprod": "asimddp", "fullfp16": "fphp",
}


def features_llvm_gives(target: "tvm.target.Target") -> set[str]:
    """The ISA features, in a fingerprint's spelling, that LLVM may use for the llvm ``target``: its
    mcpu's, with its mattr (imports TVM)."""
    from tvm.target import codegen

    features = codegen.llvm_get_cpu_features(target)
    return {_LLVM_FEATURE_NAMES.get(f, f.replace("-", "_")) for f in features} & CODEGEN_FEATURES
