# Sourced by the GPU scripts: require_gpu SCRIPT stops the script with exit 3 and one line on
# stderr where no NVIDIA GPU is visible, before it starts or writes anything; otherwise it sets
# `gpus` to what `nvidia-smi -L` lists.
require_gpu() {
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "error: no NVIDIA GPU here: nvidia-smi is not on PATH (run $1 on a box with an NVIDIA GPU and its driver)" >&2
    exit 3
  fi
  if ! gpus=$(nvidia-smi -L 2>&1) || ! grep -q '^GPU ' <<<"$gpus"; then
    echo "error: nvidia-smi lists no GPU: ${gpus//$'\n'/ } (check the driver with nvidia-smi)" >&2
    exit 3
  fi
}
