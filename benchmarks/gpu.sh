#!/usr/bin/env bash
# The prepared GPU run: the batch-serialisation benchmark on a GPU, with XLA's own device and host
# figures and the step time of each io_mode, written under $OUT (or out/bench). The packages are pure
# Python and run from their source folders, so the GPU machine needs only its own JAX with CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="packages/runtime/src:packages/core/src:packages/layers/src:packages/collectives/src"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
dest="${OUT:-out/bench}"
mkdir -p "$dest"
python3 -c "import jax; print(jax.__version__, jax.devices())"
python3 benchmarks/batch_serialisation.py --device gpu --batch "${BATCH:-16384}" --width "${WIDTH:-2048}" \
    --steps "${STEPS:-2,8,32}" --repeats "${REPEATS:-5}" --store-steps 8,64,512 2>&1 | tee "$dest/gpu.log"
cp out/bench/batch_serialisation.json "$dest/batch_serialisation_gpu.json"
