#!/bin/bash
# Issue #32's GPU checks in one call of a lent GPU machine, within 8 minutes of wall time:
#   (a) what the corrected recipe costs a step: benchmarks/gpu.py --sections recipe (ResNet50 and
#       BNInception-512, freeze_bn=stats + head_warmup_epochs=1 against off + none, one process,
#       the warm-up epoch and a normal epoch);
#   (b) 4 trials on one GPU without and with CUDA MPS against one trial: gpu.py --sections pack
#       (BNInception-512, batch 180, store-fed, 2 cores a trial), 1 trial, 4 trials, 4 under MPS;
#   (c) the learned distance D against cosine on the built-in speakers at a budget where D can
#       learn: benchmarks/speaker_verification.py --budget (3 seeds of the preview-sized source
#       configuration and one of the full-sized, every run stopped at a deadline).
# Each part has a hard time limit and writes its JSON into OUT as soon as it is done; a part
# that fails or runs out of time leaves the others' files. What comes back (8 files):
#   summary.json     the machine, each part's exit code and seconds, the headline numbers
#   log.txt          every part's output; (c)'s runs' logs; MPS's logs
#   gpu_use.csv      nvidia-smi every second (utilisation, memory, power, SM clock), part marks
#   a_recipe.json    (a): gpu.py's JSON (per model and epoch: images/s of both arms per round)
#   b_pack_1.json, b_pack_4.json, b_pack_4_mps.json   (b): gpu.py's JSON of each run
#   c_e2e.json       (c): every test evaluation of every run (EER/AUC/minDCF of cosine, D, fusion)
#
# Device call (from the repository root; .whl and .device-cache carried, see below):
#   bash benchmarks/device/recipes.sh "$OUT"
# Only some parts (a rerun on a machine still warm): RECIPES_PARTS="c" (any of a b c mps; "b"
# without "mps" skips the MPS run, "mps" alone runs only it, with (b)'s data written first).
# CPU check of every part at toy sizes (no GPU; here the venv's python and the system espeak-ng):
#   RECIPES_TINY=1 PY=/work/venv/bin/python bash benchmarks/device/recipes.sh /tmp/recipes-out
#
# What must travel with the working tree (both are ignored by git):
#   .whl/          the Python packages the device's image lacks, for its Python 3.12:
#                  faiss-cpu, pytorch-metric-learning, soundfile, cffi, pycparser (README of the
#                  device tool, "a Python package missing there"; about 20 MB);
#   .device-cache/espeak-ng.tar.xz   espeak-ng 1.51 (Debian 12) with its libraries (all but
#                  glibc's) and its English data, made by benchmarks/device/espeak_bundle.sh
#                  (about 4 MB): the speakers corpus is 121 MB of FLAC, over the 64 MiB a call
#                  carries, so it is synthesised there (byte-identical to here for the same
#                  espeak-ng version); used only when the machine has no espeak-ng of its own.
set -u
out=${1:?usage: recipes.sh OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../.."
repo=$(pwd)
py=${PY:-python3}
tiny=${RECIPES_TINY:-0}
only=" ${RECIPES_PARTS:-a b c mps} "
want() { case $only in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
export PYTHONUNBUFFERED=1 MPLCONFIGDIR=/tmp/dmlsearch-mpl
export DMLSEARCH_CACHE=${RECIPES_CACHE:-/tmp/dmlsearch-cache}  # the speakers corpus
scratch=/tmp/recipes-bench                                       # (b)'s CUB-like tree and store
log=$out/log.txt parts=/tmp/recipes-parts.txt machine=/tmp/recipes-machine.txt
: > "$log"; : > "$parts"; : > "$machine"; : > "$out/gpu_use.csv"
started=$(date +%s)
note() { echo "== $(date -u +%T) (+$(( $(date +%s) - started )) s) $*" | tee -a "$log"; }
mark() { echo "# $(date -u +%T) $*" >> "$out/gpu_use.csv"; }
# part NAME LIMIT_S COMMAND...: run with a hard limit (its whole process group), log, record.
part() {
    local name=$1 limit=$2 t0 rc
    shift 2
    note "$name: start (limit ${limit} s)"; mark "$name start"
    t0=$(date +%s)
    timeout -k 5 "$limit" "$@" >> "$log" 2>&1
    rc=$?
    echo "$name $rc $(( $(date +%s) - t0 ))" >> "$parts"
    note "$name: exit $rc after $(( $(date +%s) - t0 )) s"; mark "$name end rc=$rc"
    return 0
}
# Cores: the first ones for the measured part, the last six for work run beside it.
n=$(nproc)
if [ "$n" -ge 12 ] && command -v taskset >/dev/null; then
    front="taskset -c 0-$((n - 7))" back="taskset -c $((n - 6))-$((n - 1))"
else
    front="" back=""
fi
if [ "$tiny" = 1 ]; then  # toy sizes on a CPU; limits for a slow, shared 2-core machine
    gpu_args=(--rehearse) four=2 dev=cpu
    c_args=(--arms preview --seeds 1 --budget-steps 12 --eval-every 1 --budget-seconds 300
            --grace 30)
    lim_a=240 lim_c=360 lim_b1=240 lim_b4=300 lim_data=300 lim_corpus=300
else
    gpu_args=() four=4 dev=cuda
    c_args=(--budget-steps 3000 --evals 20 --budget-seconds 88 --grace 12)
    lim_a=85 lim_c=115 lim_b1=65 lim_b4=75 lim_data=110 lim_corpus=100
fi

# ---- setup: packages, the project as the package dmlsearch, the machine -----------------------
note "setup"
if [ "$tiny" != 1 ] && ls .whl/*.whl >/dev/null 2>&1; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl >> "$log" 2>&1 || note "setup: wheel install FAILED"
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# The repository's folders are the namespace package dmlsearch's subpackages (pyproject.toml).
rm -rf /tmp/recipes-ns && mkdir -p /tmp/recipes-ns/dmlsearch
for d in search trainables spaces; do ln -s "$repo/$d" "/tmp/recipes-ns/dmlsearch/$d"; done
export PYTHONPATH=/tmp/recipes-ns${PYTHONPATH:+:$PYTHONPATH}
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode \
        --format=csv,noheader 2>&1 | head -1)"
    echo "nproc: $n"
    echo "kernel: $(uname -r)"
    echo "python_torch: $("$py" -c 'import platform, torch; print(platform.python_version(),
torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 |
        tail -1)"
    echo "imports: $("$py" -c 'import faiss, soundfile, pytorch_metric_learning
import dmlsearch.trainables.fit, dmlsearch.spaces; print("ok, faiss", faiss.__version__)' 2>&1 |
        tail -1)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown) (working tree as sent)"
} >> "$machine"
cat "$machine" >> "$log"
if ! grep -q '^imports: ok' "$machine"; then  # nothing below can run: stop, keep device time
    note "setup: the project does not import with this machine's Python; stopping"
    echo "setup 3 $(( $(date +%s) - started ))" >> "$parts"
    "$py" benchmarks/device/recipes_summary.py "$out" "$parts" "$machine" >> "$log" 2>&1
    exit 3
fi
nvidia-smi >> "$log" 2>&1
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw,clocks.sm \
    --format=csv -l 1 >> "$out/gpu_use.csv" 2>/dev/null &
monitor=$!
mps_up=0
finish() {
    if [ "$mps_up" = 1 ]; then  # stopped while MPS ran: stop its daemon
        echo quit | CUDA_MPS_PIPE_DIRECTORY=/tmp/recipes-mps-pipe timeout 10 "$mps" >> "$log" 2>&1
        mps_up=0
    fi
    kill "$monitor" 2>/dev/null
    for f in /tmp/recipes-c/budget-*.log; do
        [ -f "$f" ] && { echo "---- $f (last 40 lines)"; tail -n 40 "$f"; } >> "$log"
    done
    for f in /tmp/recipes-mps-log/*.log; do
        [ -f "$f" ] && { echo "---- $f"; tail -n 40 "$f"; } >> "$log"
    done
    echo "total - $(( $(date +%s) - started ))" >> "$parts"
    "$py" benchmarks/device/recipes_summary.py "$out" "$parts" "$machine" >> "$log" 2>&1
    note "done; files: $(ls "$out" | tr '\n' ' ')"
}
trap finish EXIT
trap 'exit 143' TERM INT  # a stopped script still stops MPS and writes its summary

# espeak-ng for the speakers corpus: the machine's, else the carried one.
if command -v espeak-ng >/dev/null && [ "${RECIPES_ESPEAK_BUNDLE:-0}" != 1 ]; then
    echo "espeak: the machine's: $(espeak-ng --version 2>&1 | head -1)" >> "$machine"
    espeak_path=$PATH
elif [ -f .device-cache/espeak-ng.tar.xz ]; then
    rm -rf /tmp/espeak-bundle && tar xJf .device-cache/espeak-ng.tar.xz -C /tmp
    espeak_path=/tmp/espeak-bundle/bin:$PATH
    echo "espeak: carried: $(PATH=$espeak_path espeak-ng --version 2>&1 | head -1)" >> "$machine"
else
    echo "espeak: none (part c cannot build the speakers corpus)" >> "$machine"
    espeak_path=$PATH
fi
export PATH=$espeak_path  # (c)'s runs load the speakers corpus, which looks for espeak-ng too
note "setup done: $(tail -n 1 "$machine")"

# ---- the speakers corpus, built beside (a) on the last cores ---------------------------------
corpus=""
if want c; then
    mark "corpus start"
    PATH=$espeak_path timeout -k 5 "$lim_corpus" $back "$py" -c '
import time; t = time.time()
from dmlsearch.trainables.data import load_dataset
print(load_dataset("speakers"), f"ready in {time.time() - t:.1f} s")' \
        > /tmp/recipes-corpus.log 2>&1 &
    corpus=$!
fi

# ---- (a) the recipe's cost per step --------------------------------------------------------------
want a && part a_recipe "$lim_a" $front "$py" benchmarks/gpu.py "${gpu_args[@]}" --sections recipe \
    --recipe-steps 15 --recipe-rounds 5 --scratch /tmp/recipes-weights --out "$out/a_recipe.json"

if [ -n "$corpus" ]; then
    wait "$corpus"; rc=$?
    echo "corpus $rc $(( $(date +%s) - started ))" >> "$parts"  # seconds: since the start
    echo "corpus: $(tail -n 1 /tmp/recipes-corpus.log)" >> "$machine"
    cat /tmp/recipes-corpus.log >> "$log"; mark "corpus end"
fi

# ---- (b)'s data, written beside (c) on the last cores ----------------------------------------------
data=""
if want b || want mps; then
    rm -rf "$scratch"
    timeout -k 5 "$lim_data" $back "$py" benchmarks/gpu.py "${gpu_args[@]}" --sections data \
        --scratch "$scratch" > /tmp/recipes-data.log 2>&1 &
    data=$!
fi

# ---- (c) the learned distance against cosine -------------------------------------------------------
rm -rf /tmp/recipes-c
want c && part c_e2e "$lim_c" $front "$py" benchmarks/speaker_verification.py --budget \
    --device "$dev" --out /tmp/recipes-c "${c_args[@]}"
if ! want c; then
    :
elif [ -f /tmp/recipes-c/budget.json ]; then
    cp /tmp/recipes-c/budget.json "$out/c_e2e.json"
else  # stopped before it gathered its runs: their lines as they are
    "$py" -c 'import json, pathlib, sys
rows = [json.loads(l) for f in sorted(pathlib.Path("/tmp/recipes-c").glob("*.jsonl"))
        for l in f.read_text().splitlines() if l.strip()]
json.dump({"runs": "not gathered (part c stopped)", "rows": rows}, open(sys.argv[1], "w"))' \
        "$out/c_e2e.json" >> "$log" 2>&1
fi

if [ -n "$data" ]; then
    wait "$data"; rc=$?
    echo "b_data $rc $(( $(date +%s) - started ))" >> "$parts"  # seconds: since the start
    echo "b_data: $(grep -o '"store_build_seconds": [0-9.]*' /tmp/recipes-data.log | head -1)" \
        >> "$machine"
    cat /tmp/recipes-data.log >> "$log"
fi

# ---- (b) packing: 1 trial, 4 trials, 4 trials under MPS ----------------------------------------
pack() {  # pack NAME LIMIT TRIALS
    part "$1" "$2" "$py" benchmarks/gpu.py "${gpu_args[@]}" --sections pack --pack "$3" \
        --scratch "$scratch" --keep-data --out "$out/$1.json"
}
want b && pack b_pack_1 "$lim_b1" 1
want b && pack b_pack_4 "$lim_b4" "$four"
want mps || exit 0

mps=$(command -v nvidia-cuda-mps-control || ls /usr/local/nvidia/bin/nvidia-cuda-mps-control \
      /usr/bin/nvidia-cuda-mps-control 2>/dev/null | head -1)
if [ -z "$mps" ]; then
    echo "mps: unavailable (no nvidia-cuda-mps-control on PATH, /usr/local/nvidia/bin, /usr/bin)" \
        >> "$machine"
    note "MPS: no nvidia-cuda-mps-control here; b_pack_4_mps skipped"
else
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/recipes-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/recipes-mps-log
    rm -rf "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if timeout 10 "$mps" -d >> "$log" 2>&1; then
        mps_up=1
        # A client through MPS: the server starts for it and then is listed.
        timeout -k 2 20 "$py" -c 'import torch
d = "cuda" if torch.cuda.is_available() else "cpu"
print("MPS probe:", torch.ones(8, device=d).sum().item(), d)' >> "$log" 2>&1
        probe=$?
        server=$(echo get_server_list | timeout 5 "$mps" 2>&1 | tr -s '\n' ' ' | sed 's/ *$//')
        echo "mps: $mps, daemon started, probe exit $probe, server list: ${server:-empty}" \
            >> "$machine"
        note "MPS: probe exit $probe, server ${server:-none}"
        if [ "$probe" = 0 ] && [[ $server =~ ^[0-9\ ]+$ ]]; then  # a server's process id
            # 40 s in, what nvidia-smi says of the processes (MPS clients show as M+C).
            (sleep 40; { echo "---- nvidia-smi during b_pack_4_mps"; nvidia-smi; } >> "$log" 2>&1) &
            pack b_pack_4_mps "$lim_b4" "$four"
        else
            note "MPS: daemon up but no working server; b_pack_4_mps skipped"
        fi
        echo quit | timeout 10 "$mps" >> "$log" 2>&1 && mps_up=0
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    else
        echo "mps: $mps, daemon did not start (see log.txt)" >> "$machine"
    fi
fi
