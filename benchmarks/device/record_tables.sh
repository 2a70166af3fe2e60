#!/bin/bash
# Record the continuous MultiSimilarity table and the glyph table at once on a lent GPU machine
# (docs/benchmarks.md, "Learning-curve tables"); both recorders resume, so what a time limit
# cuts short is still a table. Run from a copy of the repository holding the Omniglot sample:
#   benchmarks/device/record_tables.sh OUT SECONDS DEVICE MS_SAMPLE GLYPH_SAMPLE MS_WORKERS \
#       GLYPH_WORKERS [--set KEY=VALUE ...]
set -u
out=$1 limit=$2 device=$3 n_ms=$4 n_glyphs=$5 w_ms=$6 w_glyphs=$7
shift 7
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1  # one core per training
export PYTHONUNBUFFERED=1 DMLSEARCH_CACHE=${DMLSEARCH_CACHE:-/tmp/dmlsearch-cache}
export MPLCONFIGDIR=${MPLCONFIGDIR:-/tmp/dmlsearch-mpl}
py=${PY:-python3}
record() {
    timeout "$limit" "$py" -c 'import sys; from dmlsearch.search.cli import main; sys.exit(main())' \
        record-curves --second-seed 40 --set "device=$device" "$@"
}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
  "$py" -c 'import torch, platform; print(platform.python_version(), torch.__version__,
torch.cuda.is_available())'; date -u; } > "$out/machine.txt" 2>&1
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 10 \
    > "$out/gpu_use.csv" 2>/dev/null &
monitor=$!
record --space benchmarks/curves/omniglot_ms_table.yaml --data-root omniglot_background_small1.zip \
    --out "$out/omniglot_ms.jsonl" --sample "$n_ms" --workers "$w_ms" "$@" \
    > "$out/omniglot_ms.log" 2>&1 &
record --space quickstart --out "$out/glyphs.jsonl" --sample "$n_glyphs" --set threads=1 \
    --workers "$w_glyphs" "$@" > "$out/glyphs.log" 2>&1 &
wait %2 %3
kill "$monitor" 2>/dev/null
date -u >> "$out/machine.txt"
wc -l "$out"/*.jsonl
