#!/usr/bin/env bash
# There (the device machine), second call: assemble and install MLX's CUDA
# build, then measure. The first call only keeps .whl/a:
#   command: mkdir -p /tmp/keep && cp .whl/a/* /tmp/keep/      carry: [".whl/a"]
# This one:
#   command: bash benchmarks/gpu/run.sh                          carry: [".whl/b"]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/site
name=$(cat .whl/b/cuda-wheel-name)
cat /tmp/keep/part00 .whl/b/part01 > "/tmp/$name" || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "/tmp/$name" .whl/b/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
python3 -c "import mlx.core as mx; print('mlx', mx.__version__, 'gpu', mx.is_available(mx.gpu))" \
    | tee -a "$out/gpu.txt" || exit 1
# The engine's self-test on the GPU lane, then the measurement (JSON on stdout).
# Each step has its own limit; one that runs out is sent SIGABRT, so Python's
# faulthandler (-X faulthandler) prints every thread's stack before it dies.
model=$(timeout 120 python3 -X faulthandler -c "
from pathlib import Path
from benchmarks.hybrid_real import QWEN_0_5B, synthetic_model
print(synthetic_model(Path('/tmp/bench-models'), QWEN_0_5B))") || exit 1
started=$SECONDS
timeout -s ABRT ${SELF_TEST_S:-180} python3 -X faulthandler -m app --self-test --model "$model" \
    > "$out/self-test.txt" 2>&1
echo "self-test exit $? after $((SECONDS - started)) s" | tee -a "$out/self-test.txt"
tail -25 "$out/self-test.txt"
started=$SECONDS
timeout -s ABRT ${HYBRID_S:-240} python3 -X faulthandler benchmarks/hybrid_real.py \
    --model "$model" --tabs 16 --repeats ${REPEATS:-2} --ablate-contention \
    > "$out/hybrid_real.json" 2> "$out/hybrid_real.log"
echo "hybrid_real exit $? after $((SECONDS - started)) s"
tail -25 "$out/hybrid_real.log"
