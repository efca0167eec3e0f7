#!/usr/bin/env bash
# The prepared GPU run: every benchmark at GPU sizes, with XLA's own device and host figures, logs and
# JSON figures written under $OUT (or out/bench). The packages and the examples' GPT model are pure Python
# and run from their source folders, so the GPU machine needs only its own JAX with CUDA. Each step has a
# time limit so that the whole run ends within about twelve minutes; a step that runs out is reported and
# the rest still run.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="packages/runtime/src:packages/addons/src:examples:benchmarks"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
dest="${OUT:-out/bench}"
mkdir -p "$dest"
status=0

step() {  # step NAME SECONDS COMMAND...: run COMMAND under a time limit, its output to $dest/NAME.log
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit} s)"
    rm -f "out/bench/$name.json"  # so that a step that fails leaves no earlier figures to copy
    timeout "$limit" "$@" 2>&1 | tee "$dest/$name.log"
    local rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || { echo "== $name failed with status $rc"; status=1; }
    [ -f "out/bench/$name.json" ] && [ "$dest" != out/bench ] && cp "out/bench/$name.json" "$dest/${name}_gpu.json"
    return 0
}

# build_scaling and compile_scaling measure host-side graph building and compiling, and replication
# simulates CPU replicas: they are not GPU benchmarks and are left to `nox -s bench`.
python3 -c "import jax; print(jax.__version__, jax.devices())" || exit 1
step batch_serialisation 120 python3 benchmarks/batch_serialisation.py --device gpu --batch "${BATCH:-16384}" \
    --width "${WIDTH:-2048}" --steps "${STEPS:-2,8,32}" --repeats "${REPEATS:-5}" --store-steps 8,64,512
# The GPT decoder at the widths of a 2.7B-parameter model: 32 layers of width 2560, 32 heads,
# 4 micro-batches of one 1024-token sequence, float16 with loss scaling.
step gpt_phased 270 python3 benchmarks/gpt_phased.py --device gpu --float16 --layers "${GPT_LAYERS:-32}" \
    --width "${GPT_WIDTH:-2560}" --heads "${GPT_HEADS:-32}" --sequence "${GPT_SEQUENCE:-1024}" \
    --micro-batches "${GPT_MICRO_BATCHES:-4}" --repeats 3 --matmul-size 8192
step planner 60 python3 benchmarks/planner.py --device gpu --width 1024 --batch 8192
# The phased GPT at the largest size the machine holds (its state in host memory, one layer at a time on
# the GPU) beside the same model in JAX: 2.7b is 32 layers of width 2560, float16, 4 micro-batches of one
# 1024-token sequence. Each size's figures are saved as it finishes, so a run out of time keeps them.
step gpt_scale 270 python3 benchmarks/gpt_scale.py --device gpu --sizes "${SCALE_SIZES:-2.7b}" --dtypes float16 \
    --sequence 1024 --micro-batches 4 --steps 2 --tiers phased
# The three tiers of remote memory at one size: the GPU's own memory, pinned host memory and files on the local
# disk (NVMe where the machine has it), with the disk's own bandwidth and a timeline of one step on disk.
step gpt_scale_tiers 200 python3 benchmarks/gpt_scale.py --device gpu --sizes "${TIER_SIZES:-medium}" \
    --dtypes float16 --sequence 1024 --micro-batches 4 --steps 2 --tiers device,phased,disk --matmul-size 8192 \
    --probe-bytes 1073741824 --out "$dest/tiers"
exit $status
