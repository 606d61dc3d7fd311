#!/usr/bin/env bash
# Here (any machine with PyPI): fetch what the H200 device machine lacks for
# MLX's CUDA build, into .whl/ at the repository root (ignored by git), split
# so that each of the two device calls carries less than 64 MiB:
#   .whl/a: the first half of mlx-cuda-13
#   .whl/b: its second half, mlx, mlx-lm, gguf (pure Python; the engine's
#           GGUF reader imports llama.cpp's type tables from it) and llguidance
#           (constrained decoding; an abi3 wheel)
# Everything else MLX and mlx-lm need (numpy, transformers, tokenizers,
# jinja2, pyyaml, protobuf, safetensors, psutil, the nvidia-*-cu13 runtime) is
# already installed there (/work/.library/device/KINDS.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
rm -rf .whl && mkdir -p .whl/a .whl/b .whl/dl
PY=${PY:-.venv/bin/python}
MLX=$($PY -c "import importlib.metadata as m; print(m.version('mlx'))")
MLX_LM=$($PY -c "import importlib.metadata as m; print(m.version('mlx-lm'))")
GGUF=$($PY -c "import importlib.metadata as m; print(m.version('gguf'))")
LLG=$($PY -c "import importlib.metadata as m; print(m.version('llguidance'))")
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 -d .whl/dl "mlx==$MLX" "mlx-cuda-13==$MLX"
$PY -m pip download -q --no-deps --only-binary=:all: -d .whl/dl "mlx-lm==$MLX_LM" "gguf==$GGUF"
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_31_x86_64 -d .whl/dl "llguidance==$LLG"
cuda=$(ls .whl/dl/mlx_cuda_13-*.whl)
split -n 2 -d "$cuda" ".whl/dl/part"
mv .whl/dl/part00 .whl/a/
mv .whl/dl/part01 .whl/b/
basename "$cuda" > .whl/b/cuda-wheel-name
mv .whl/dl/mlx-*.whl .whl/dl/mlx_lm-*.whl .whl/dl/gguf-*.whl .whl/dl/llguidance-*.whl .whl/b/
rmdir .whl/dl 2>/dev/null || rm -rf .whl/dl
du -sh .whl/a .whl/b
