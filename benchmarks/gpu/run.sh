#!/usr/bin/env bash
# One self-limiting GPU run (issue 20). There (the device machine), second
# call: assemble and install MLX's CUDA build, then measure. The first call
# only keeps .whl/a:
#   command: mkdir -p /tmp/keep && cp .whl/a/* /tmp/keep/      carry: [".whl/a"]
# This one:
#   command: bash benchmarks/gpu/run.sh                          carry: [".whl/b"]
# Here, without a GPU, a dry run of every step with a CPU lane standing in
# for the GPU (checks the script, measures nothing about a GPU):
#   STAND_IN=1 bash benchmarks/gpu/run.sh
#
# Steps, each with its own limit; one that runs out gets SIGABRT, so
# Python's faulthandler prints every thread's stack into run.log:
#   startup.json     a two-lane engine's start-up timeline, first answers,
#                    GPU / CPU greedy agreement (benchmarks/gpu/startup.py)
#   throughput.json  the GPU lane vs mlx-lm: single stream (also with the
#                    lone-request path off) and 16 streams, 5 alternating
#                    repeats, host time and device wait per step
#   hybrid_think.json / hybrid_saturated.json   GPU-only vs hybrid on the
#                    chat workload with think time, then with none
#   constrained.txt  (in run.log) what constrained rows (llguidance masks) cost a GPU step:
#                    16 rows, 0 / 8 / 16 under a JSON schema (issue 23)
#   drafts.json      drafts on the GPU lane (issue 32, benchmarks/speculative.py):
#                    sampling kernel old vs new, the model drafting for itself
#                    beside mlx-lm's speculative_generate_step (every greedy
#                    draft accepted: the machinery's cost), lookup drafts alone
#                    and 16 streams (random weights copy nothing: what misses cost)
#   step_host.json   the host's ms per GPU-lane step while requests finish
#                    among others, 1 / 16 / 64 streams: prefix-cache copies
#                    waited for vs scheduled (issue 34, benchmarks/step_host_time.py)
#   kv_restore.json  chats resume warm (issue 33, benchmarks/kv_restore.py):
#                    the next message's first token after a restart, KV read
#                    back from disk vs recomputed, on the GPU lane and the CPU
#                    lane each alone (or prefilled, where that beats reading)
# At most 8 files come back: run.log (which starts with the GPU and MLX
# lines) and the others: constrained.txt goes into run.log to make room.
# STEPS="startup throughput" runs only those steps.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/out}
mkdir -p "$out"
log="$out/run.log"
stand_in=${STAND_IN:-}
if [ -n "$stand_in" ]; then
    py=${PYTHON:-.venv/bin/python}
    flag=--stand-in
    lane=cpu
    work=${WORK_DIR:-build/bench-models}
    echo "stand-in: a CPU lane acts as the GPU (no GPU figures)" | tee "$log"
else
    py=python3
    flag=
    lane=gpu
    work=/tmp/bench-models
    mkdir -p /tmp/site
    name=$(cat .whl/b/cuda-wheel-name)
    cat /tmp/keep/part00 .whl/b/part01 > "/tmp/$name" || exit 1
    timeout 120 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target /tmp/site "/tmp/$name" .whl/b/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$log"
fi
export PYTHONUNBUFFERED=1
$py -c "import engine, mlx.core as mx; print('mlx', mx.__version__, 'gpu', mx.is_available(mx.gpu),
'blas', engine.loaded_blas)" | tee -a "$log" || exit 1
(ldconfig -p | grep -i openblas | head -3) >> "$log" 2>&1
model=$(timeout 120 $py -X faulthandler -c "
from pathlib import Path
from benchmarks.hybrid_real import QWEN_0_5B, synthetic_model
print(synthetic_model(Path('$work'), QWEN_0_5B, ${LAYERS:-None}))") || exit 1

steps=" ${STEPS:-startup throughput hybrid-think hybrid-saturated constrained drafts step-host kv-restore} "
step() {  # step NAME LIMIT_S OUTFILE COMMAND...
    local name=$1 limit=$2 file=$3
    shift 3
    [[ "$steps" == *" $name "* ]] || return 0
    local started=$SECONDS
    echo "== $name (limit ${limit} s)" >> "$log"
    timeout -s ABRT "$limit" "$@" > "$out/$file" 2>> "$log"
    echo "== $name exit $? after $((SECONDS - started)) s" | tee -a "$log"
}

step startup "${STARTUP_S:-120}" startup.json \
    $py -X faulthandler benchmarks/gpu/startup.py --model "$model" $flag
step throughput "${THROUGHPUT_S:-140}" throughput.json \
    $py -X faulthandler benchmarks/engine_throughput.py --model "$model" --lane $lane \
    --streams 16 --repeats "${REPEATS:-5}" --solo-ab --engine-only --tokens "${TOKENS:-128}"
step hybrid-think "${HYBRID_S:-150}" hybrid_think.json \
    $py -X faulthandler benchmarks/hybrid_real.py --model "$model" $flag \
    --tabs "${TABS:-16}" --repeats 1 --max-answer "${MAX_ANSWER:-128}"
step hybrid-saturated "${SATURATED_S:-90}" hybrid_saturated.json \
    $py -X faulthandler benchmarks/hybrid_real.py --model "$model" $flag \
    --tabs "${TABS:-16}" --repeats 1 --max-answer "${MAX_ANSWER:-128}" --think-scale 0.001
step constrained "${CONSTRAINED_S:-90}" constrained.log \
    $py -X faulthandler benchmarks/constrained_step_cost.py --model "$model" --device $lane \
    --rounds "${ROUNDS:-2}" --steps "${CSTEPS:-100}"
step drafts "${DRAFTS_S:-150}" drafts.log \
    $py -X faulthandler benchmarks/speculative.py --model "$model" --skip-engine \
    --draft-model --lanes --rounds "${DRAFT_ROUNDS:-2}" --streams 16 \
    --answer-tokens "${DRAFT_TOKENS:-128}" --out "$out/drafts.json"
rm -f "$out/drafts.log"  # the same report as drafts.json, which is written part by part
if [ -f "$out/constrained.log" ]; then  # into run.log: at most 8 files come back
    { echo "== constrained.txt"; cat "$out/constrained.log"; } >> "$log"
    rm -f "$out/constrained.log"
fi
step step-host "${STEP_HOST_S:-150}" step_host.json \
    $py -X faulthandler benchmarks/step_host_time.py --model "$model" --lane $lane \
    --streams ${HOST_STREAMS:-1 16 64} --rounds "${HOST_ROUNDS:-2}"
kv_lanes=$([ -n "$stand_in" ] && echo cpu || echo "gpu cpu")
step kv-restore "${KV_S:-180}" kv_restore.json \
    $py -X faulthandler benchmarks/kv_restore.py --model "$model" --lanes $kv_lanes \
    --tokens ${KV_TOKENS:-1000 4000}
tail -40 "$log"
