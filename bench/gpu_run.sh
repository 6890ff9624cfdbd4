#!/usr/bin/env bash
# The one prepared run for a lent GPU box that reaches no package index: install the farm from its
# offline bundle, run bench/gpu_e2e.sh (bert, cuda, batch 15, a few trials per task), and, where
# the box has the cores, the farm's scaling with 1/2/4/8 pinned CPU agents; results go to a folder.
#
# A bundle (~220 MB) is larger than one call to such a box can carry (64 MiB, the working tree
# included), so it travels in parts, one per call, each call within the box's warm period of the
# last (docs/benchmarks.md, "On a GPU", lists the calls):
#
#   bench/gpu_run.sh pack [BUNDLE]   here: write the bundle for the box's Python (PYTHON_VERSION,
#                                    default 3.12) unless BUNDLE is given, and cut it into
#                                    $PARTS/part-K-of-N (PART_MIB each, default 56) and
#                                    $PARTS/SHA256SUMS
#   bench/gpu_run.sh receive         there: check the carried parts and keep them in $STAGE
#   bench/gpu_run.sh install         there or here: receive, join the parts, and scripts/setup
#                                    --offline the bundle into $VENV (no GPU needed: a dry run)
#   bench/gpu_run.sh run             there, the last call: refuse at once without a GPU, install,
#                                    then measure; everything lands in $OUT
#
# PARTS (default .gpu-bundle/parts, git-ignored), STAGE (default /var/tmp/farm-gpu-bundle: kept
# between calls while the box stays warm), VENV (default .venv-gpu), OUT (default $STAGE/out).
# run takes BATCH (15), TRIALS_PER_TASK (4), SCALE_SECONDS (30: each agent count's window) and
# DEADLINE_S (540: a step that would not end by then is skipped, and the summary says so).
#
# Exit codes: 0 done; 1 the GPU run failed or was cut short (its summary and logs are in $OUT);
# 2 bad usage, or a part or the bundle does not match its checksums; 3 no GPU (run), or parts
# missing; anything else a failed install step (install.log in $OUT).
# Never run on a GPU by this project yet (README, "What ran where").
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/bench/gpu_check.sh"
parts=$(realpath -m "${PARTS:-$here/.gpu-bundle/parts}")
stage=$(realpath -m "${STAGE:-/var/tmp/farm-gpu-bundle}")
venv=$(realpath -m "${VENV:-$here/.venv-gpu}")
out=$(realpath -m "${OUT:-$stage/out}")
started=$SECONDS

fail() {  # fail CODE LINE
  echo "error: $2" >&2
  exit "$1"
}

pack() {
  local bundle=${1:-}
  if [ -z "$bundle" ]; then
    bundle=$here/.gpu-bundle/bundle
    rm -rf "$bundle"
    "$here/.venv/bin/python" "$here/scripts/bundle" "$bundle" --python "${PYTHON_VERSION:-3.12}"
  fi
  [ -f "$bundle/manifest.json" ] || fail 3 "no bundle at $bundle: manifest.json is missing (write one with scripts/bundle)"
  mkdir -p "$parts" && rm -f "$parts"/part-* "$parts"/cut-* "$parts/SHA256SUMS"
  tar -C "$bundle" -cf - . | split -b "${PART_BYTES:-$((${PART_MIB:-56} * 1024 * 1024))}" -d -a 2 - "$parts/cut-"
  local cuts=("$parts"/cut-*) k=0
  for cut in "${cuts[@]}"; do
    k=$((k + 1))
    mv "$cut" "$parts/part-$k-of-${#cuts[@]}"
  done
  (cd "$parts" && sha256sum part-* >SHA256SUMS)
  echo "packed $bundle into ${#cuts[@]} part(s) in $parts; one device call each, carrying"
  for k in $(seq "${#cuts[@]}"); do
    local verb=receive
    [ "$k" = "${#cuts[@]}" ] && verb=run
    echo "  call $k: carry ${parts#"$here"/}/part-$k-of-${#cuts[@]} and ${parts#"$here"/}/SHA256SUMS; bench/gpu_run.sh $verb"
  done
}

receive() {
  mkdir -p "$stage/parts"
  local part name
  for part in "$parts"/part-*; do
    [ -e "$part" ] || continue
    name=${part##*/}
    grep -q " $name\$" "$parts/SHA256SUMS" 2>/dev/null \
      || fail 2 "$name is not listed in $parts/SHA256SUMS (carry the SHA256SUMS that pack wrote with it)"
    (cd "$parts" && grep " $name\$" SHA256SUMS | sha256sum --check --quiet --status) \
      || fail 2 "$part does not match its sha256 in SHA256SUMS (it was cut short or changed; carry it again)"
    cp "$part" "$stage/parts/$name"
  done
  [ -f "$parts/SHA256SUMS" ] && cp "$parts/SHA256SUMS" "$stage/parts/SHA256SUMS"
  local have=("$stage"/parts/part-*)
  [ -e "${have[0]}" ] || fail 3 "no bundle parts in $parts or $stage/parts (carry $parts/part-K-of-N with SHA256SUMS)"
  local total=${have[0]##*-of-}
  echo "have ${#have[@]} of $total bundle part(s) in $stage/parts"
}

install() {
  receive
  local have=("$stage"/parts/part-*) total k missing=()
  total=${have[0]##*-of-}
  for k in $(seq "$total"); do
    [ -f "$stage/parts/part-$k-of-$total" ] || missing+=("$k")
  done
  [ "${#missing[@]}" = 0 ] || fail 3 "bundle part(s) ${missing[*]} of $total are not here (the box went back between calls, or they were not carried yet: carry each in turn with bench/gpu_run.sh receive)"
  rm -rf "$stage/bundle" && mkdir -p "$stage/bundle"
  for k in $(seq "$total"); do cat "$stage/parts/part-$k-of-$total"; done | tar -C "$stage/bundle" -xf -
  local python_exe=${PYTHON:-python3}
  PYTHON=$python_exe VENV=$venv "$here/scripts/setup" --offline "$stage/bundle"
}

# The box's PyTorch, behind the venv's own packages: the venv cannot hold torch (it is not in the
# bundle), and the box's python3 is itself a venv, so --system-site-packages would not reach it.
bridge_box_torch() {
  local site
  site=$("${PYTHON:-python3}" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null) \
    || { echo "note: the box's python3 has no torch; PyTorch is left out" | tee -a "$out/summary.md"; return 0; }
  "$venv/bin/python" -c 'import site, sys; print(site.getsitepackages()[0])' | {
    read -r own
    echo "$site" >"$own/zz_box_torch.pth"
  }
}

time_left() {  # time_left SECONDS: true while a step of that length still ends before DEADLINE_S
  [ $((SECONDS - started + $1)) -le "${DEADLINE_S:-540}" ]
}

measure() {
  mkdir -p "$out"
  {
    echo "# bench/gpu_run.sh, $(date -u +%FT%TZ)"
    echo
    echo "GPU: $(sed -n 's/^GPU 0: //p' <<<"$gpus"); CPUs: $(nproc); driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
  } >"$out/summary.md"
  local code
  set +e  # errexit holds inside the subshell only where it is not tested with || (bash's rule)
  (set -e; install) >"$out/install.log" 2>&1
  code=$?
  set -e
  if [ "$code" != 0 ]; then
    grep '^error: ' "$out/install.log" | tail -1 >&2 || tail -3 "$out/install.log" >&2
    exit "$code"
  fi
  bridge_box_torch
  [ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # TVM's default CUDA compiler, NVRTC, needs the cuda-bindings package, which the bundle does not hold.
  export TVM_CUDA_COMPILE_MODE=${TVM_CUDA_COMPILE_MODE:-nvcc}
  # With the box's torch importable, tvm-ffi would build its torch DLPack addon with a compiler on
  # first import where torch lacks the exchange API; the farm hands torch no tensors.
  export TVM_FFI_DISABLE_TORCH_C_DLPACK=${TVM_FFI_DISABLE_TORCH_C_DLPACK:-1}
  {
    "$venv/bin/farm" --version
    "$venv/bin/farm" fingerprint --target cuda
  } >"$out/versions.txt" 2>&1 || true
  sed 's/^/    /' "$out/versions.txt" >>"$out/summary.md"

  local work=$stage/work
  rm -rf "$work"
  echo "== bench/gpu_e2e.sh, bert cuda ${BATCH:-15}, ${TRIALS_PER_TASK:-4} trials per task" | tee -a "$out/summary.md"
  # Bounded, so that the summary and the logs are still written inside the call's limit.
  local allowed=$(( ${DEADLINE_S:-540} - (SECONDS - started) - 20 ))
  [ "$allowed" -gt 60 ] || allowed=60
  local e2e=0
  FARM=$venv/bin/farm PYTHON=$venv/bin/python WORK=$work BATCH=${BATCH:-15} \
    TRIALS_PER_TASK=${TRIALS_PER_TASK:-4} timeout -k 15 "$allowed" bash "$here/bench/gpu_e2e.sh" \
    >"$out/e2e.log" 2>&1 || e2e=$?
  if [ "$e2e" = 0 ]; then
    echo "gpu_e2e.sh: done, $((SECONDS - started)) s since the start" >>"$out/summary.md"
  elif [ "$e2e" = 124 ] || [ "$e2e" = 137 ]; then
    echo "gpu_e2e.sh: cut short after ${allowed} s (DEADLINE_S; see e2e.log)" >>"$out/summary.md"
  else
    echo "gpu_e2e.sh: FAILED, exit $e2e (see e2e.log)" >>"$out/summary.md"
  fi
  { echo '```'; tail -40 "$out/e2e.log"; echo '```'; } >>"$out/summary.md"
  # The logs, reports and evaluate.py's results; not the registry or built libraries (their size).
  tar -C "$work" -czf "$out/e2e-work.tar.gz" --exclude='*.db' --exclude='*.so' --exclude='*.tar' . 2>/dev/null || true

  local cores
  cores=$(nproc)
  if [ "$cores" -lt 10 ]; then
    echo "scaling: skipped, $cores CPUs (1/2/4/8 pinned agents need 10)" >>"$out/summary.md"
  elif ! time_left $((4 * (2 * ${SCALE_SECONDS:-30} + 30))); then
    echo "scaling: skipped, $((SECONDS - started)) s gone of DEADLINE_S=${DEADLINE_S:-540}" >>"$out/summary.md"
  else
    echo "== bench/agent_scaling.py: 1/2/4/8 agents, one core each, ${SCALE_SECONDS:-30} s each" | tee -a "$out/summary.md"
    taskset -c 0,1 "$venv/bin/python" "$here/bench/agent_scaling.py" --seconds "${SCALE_SECONDS:-30}" \
      --out "$out/scaling.json" >>"$out/summary.md" 2>"$out/scaling.log" \
      || echo "scaling: FAILED (exit $?; see scaling.log)" >>"$out/summary.md"
  fi
  echo "== $((SECONDS - started)) s in all; results in $out" | tee -a "$out/summary.md"
  [ "$e2e" = 0 ] || exit 1  # everything above is written; the call's status says the GPU run failed
}

case "${1:-}" in
  pack) pack "${2:-}" ;;
  receive) receive ;;
  install) install ;;
  run)
    require_gpu bench/gpu_run.sh
    measure
    ;;
  *) fail 2 "usage: bench/gpu_run.sh pack [BUNDLE] | receive | install | run (see the comment at its top)" ;;
esac
