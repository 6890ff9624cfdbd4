#!/usr/bin/env bash
# bert on an NVIDIA GPU, end to end through the distributed farm, then the same comparison as on CPU.
#
# What a person with an NVIDIA GPU and its driver runs, unchanged, from a checkout set up with
# scripts/setup (plus `pip install -e .[torch]` for PyTorch on CUDA, and onnxruntime-gpu for
# onnxruntime's CUDA provider; each engine that is missing is skipped, saying so):
#
#     bench/gpu_e2e.sh            # BATCH=15 TRIALS_PER_TASK=... GPU=0 WORK=dir to change them
#
# It starts a coordinator (SQLite registry, its own TVM RPC tracker, all on loopback) and one
# agent on the GPU, runs `farm submit bert cuda 15` through them, `farm run bert cuda 15`
# (the stored library, loaded without compiling), then bench/evaluate.py --target cuda
# --no-tune: untuned TVM, the farm-tuned library, onnxruntime and PyTorch eager on the GPU,
# outputs checked first, timed interleaved. It stops what it started on any exit.
#
# Never run by this project: its development boxes have no GPU (README, "What ran where").
# Without one it stops at once with exit 3 and says why.
set -euo pipefail

source "$(dirname "$0")/gpu_check.sh"
require_gpu bench/gpu_e2e.sh

cd "$(dirname "$0")/.."
farm=${FARM:-.venv/bin/farm}
python=${PYTHON:-.venv/bin/python}
batch=${BATCH:-15}
gpu=${GPU:-0}
work=${WORK:-$(mktemp -d -t farm-gpu-e2e-XXXXXX)}
port=${PORT:-50551}
tracker_port=${TRACKER_PORT:-9590}
mkdir -p "$work"
export FARM_HOME="$work/home"
registry="sqlite:///$work/registry.db"
(umask 077; openssl rand -hex 32 >"$work/token" 2>/dev/null || "$python" -c 'import secrets; print(secrets.token_hex(32))' >"$work/token")
echo "== $(date -u +%FT%TZ) on $(sed -n 's/^GPU [0-9]*: //p' <<<"$gpus" | sed -n "$((gpu + 1))p"), work directory $work"

pids=()
stop() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop EXIT

"$farm" coordinator --listen "127.0.0.1:$port" --token-file "$work/token" --registry "$registry" \
  --tracker-listen "127.0.0.1:$tracker_port" >"$work/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 60); do
  "$farm" agents --coordinator "127.0.0.1:$port" --token-file "$work/token" >/dev/null 2>&1 && break
  sleep 1
done
"$farm" agents --coordinator "127.0.0.1:$port" --token-file "$work/token" >/dev/null \
  || { echo "error: the coordinator did not come up (see $work/coordinator.log)" >&2; exit 4; }

"$farm" agent --coordinator "127.0.0.1:$port" --token-file "$work/token" --target cuda --device "cuda:$gpu" \
  >"$work/agent.log" 2>&1 &
agent=$!
pids+=("$agent")
# An agent that cannot use the GPU (its CUDA runtime, the driver) stops at once; the job would
# otherwise wait for it until the caller gives up.
for _ in $(seq 180); do
  kill -0 "$agent" 2>/dev/null \
    || { echo "error: the GPU agent stopped: $(tail -1 "$work/agent.log") (its log: $work/agent.log)" >&2; exit 4; }
  "$farm" agents --json --coordinator "127.0.0.1:$port" --token-file "$work/token" 2>/dev/null \
    | grep -q '"cuda"' && break
  sleep 1
done

trials=()
[ -n "${TRIALS_PER_TASK:-}" ] && trials=(--trials-per-task "$TRIALS_PER_TASK")
echo "== farm submit bert cuda $batch (progress follows; agent log: $work/agent.log)"
"$farm" submit bert cuda "$batch" "${trials[@]}" --coordinator "127.0.0.1:$port" --token-file "$work/token" \
  --registry "$registry" --report "$work/report"

echo "== farm run bert cuda $batch"
"$farm" run bert cuda "$batch" --registry "$registry"

echo "== bench/evaluate.py --target cuda bert:$batch --no-tune"
"$python" bench/evaluate.py "bert:$batch" --target cuda --no-tune --registry "$registry" \
  --out "$work/results" --tag "gpu-bert-b$batch"
echo "== results in $work/results, the tuning report in $work/report"
