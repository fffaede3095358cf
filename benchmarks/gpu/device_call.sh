#!/usr/bin/env bash
# The one command given to the lent GPU machine: run.sh into a scratch folder, then its table
# and one archive of its figures, logs and each run's small files (not the data, not
# checkpoints) into $OUT/gpu (the tool brings back only a few files).
#   bash benchmarks/gpu/device_call.sh [BUDGET_SECONDS] [gpu_check.py options...]
# KEEP=1 keeps the scratch folder of an earlier call on the same machine: its prepared data and
# its pack phase's figures (pack.json) serve this call (a second call while the machine is warm).
work=/tmp/xder-gpu
[ "${KEEP:-0}" = 1 ] || rm -rf "$work"
budget=${1:-360}
shift || true
bash benchmarks/gpu/run.sh "$work" --budget "$budget" "$@"
rc=$?
mkdir -p "$OUT/gpu"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,power.limit --format=csv > "$work/nvidia-smi.csv" 2>&1
cp "$work/table.txt" "$OUT/gpu/" 2>/dev/null
(cd "$work" && find . -path ./data -prune -o -path ./smoke-images -prune -o -type f \
    \( -name '*.json' -o -name '*.txt' -o -name '*.log' -o -name '*.csv' -o -name '*.xml' -o -name events.jsonl -o -name config.toml \) \
    -print | tar -czf "$OUT/gpu/figures.tar.gz" -T -)
exit $rc
