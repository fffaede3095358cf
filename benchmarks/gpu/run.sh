#!/usr/bin/env bash
# The GPU script (benchmarks/gpu/gpu_check.py says what it measures).
#   benchmarks/gpu/run.sh OUT [--smoke] [--device cpu] [--budget SECONDS]
# Runs the five packages from this working tree (their src/ on PYTHONPATH, wheels in
# benchmarks/gpu/vendor/ too: tomli-w where the machine lacks it), with `python3` or $PYTHON.
# Needs benchmarks/gpu/data/cifar10-jpg.tar.gz unless --smoke: the CIFAR-10 JPEG archive
# (cifar10-jpg.tar.gz: train/<class>/*.jpg, test/<class>/*.jpg).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: run.sh OUT [--smoke] [--device cpu] [--budget SECONDS]}
shift
path=""
for package in data models methods eval cli; do
    path="$path:$root/packages/xder-$package/src"
done
for wheel in "$here"/vendor/*.whl; do
    [ -e "$wheel" ] && path="$path:$wheel"
done
export PYTHONPATH="${path#:}${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$out"
exec "${PYTHON:-python3}" "$here/gpu_check.py" --out "$out" "$@"
