#!/usr/bin/env bash
# The sweep-engine benchmark (simlab bench, docs/performance.md) on a GPU machine.
#
#   benchmarks/gpu.sh [more `simlab bench` arguments, e.g. --only W2,W3]
#
# Needs the repository's environment with a CUDA build of jax already installed (e.g.
# `pip install -e . "jax[cuda12]"`); the script installs nothing. It checks that jax sees a
# GPU, then runs every workload with the per-point loop timed on all points (no
# extrapolation: a GPU runs it in seconds) and writes
# benchmarks/results/gpu-<date>.json. Peak memory on the GPU is jax's peak_bytes_in_use
# (memory_stats), so the preallocating allocator is turned off; the float32 matmul precision
# jax uses (recorded as machine.matmul_precision) applies to the peak and the workloads alike.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
"$PYTHON" - <<'PY'
import sys
import jax
if jax.default_backend() != "gpu":
    sys.exit(f"benchmarks/gpu.sh: jax's backend is {jax.default_backend()!r}, not 'gpu' "
             "(install a CUDA build of jax)")
print("devices:", jax.devices())
PY
export XLA_PYTHON_CLIENT_PREALLOCATE=false
# The PyTorch peer loop (P1-P5) runs on the GPU too when torch sees CUDA, else it is skipped.
TORCH_DEVICE=$("$PYTHON" -c "import torch; print('cuda' if torch.cuda.is_available() else 'none')" 2>/dev/null || echo none)
exec "$PYTHON" -m benchmarks.sweep --tag gpu --loop-points 0 --peak-n 8192 --stages W2,W3 \
    --torch-device "$TORCH_DEVICE" "$@"
