#!/usr/bin/env bash
# The GPU check, as one command: the CUDA tests (captured vs eager codes), then a benchmark suite
# (`arjet bench --suite`), into one folder: report.md, report.json and log.txt.
#
#   bash scripts/gpu_check.sh OUT [SUITE [SECTIONS]]
#
# SUITE: gpu-proof (default; the GPU-proof issue's sections, ~7 minutes on one H100), gpu or gpu-quick.
# SECTIONS: a comma-separated list of the suite's sections, and `tests` for the CUDA tests (default: all, the
# tests first). GPU_CHECK_SECONDS bounds the whole check (default 420): a section that no longer fits is
# skipped and the report says so.
#
# On a GPU machine without network access, with torch installed: wheels of what else arjet needs
# (transformers, diffusers, ...) in .whl/ at the repository's root are installed into a temporary folder
# first, and arjet runs from src/ when it is not installed.
set -uo pipefail
out=${1:?usage: bash scripts/gpu_check.sh OUT [SUITE [SECTIONS]]}
suite=${2:-gpu-proof}
sections=${3:-all}
limit_s=${GPU_CHECK_SECONDS:-420}
cd "$(dirname "$0")/.."
mkdir -p "$out"
work=$(mktemp -d)
exec > >(tee "$out/log.txt") 2>&1

if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$work/site" .whl/*.whl || exit 1
    export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 -c "import arjet" 2>/dev/null || export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>/dev/null
python3 -c "import torch, transformers, arjet; print('torch', torch.__version__, '| transformers', transformers.__version__, '| arjet', arjet.__version__, arjet.__file__)"

suite_args=()
[ "$sections" = all ] || suite_args=(--sections "$(tr ',' '\n' <<<"$sections" | grep -vx tests | paste -sd,)")
if [ "$sections" = all ] || tr ',' '\n' <<<"$sections" | grep -qx tests; then
    echo "== CUDA tests =="
    timeout 150 python3 -m pytest -m cuda -q -p no:cacheprovider --junitxml "$work/cuda-tests.xml" \
        tests/samplers/test_capture.py tests/engine/test_engine.py tests/bench/test_floor.py tests/bench/test_suite.py
    suite_args+=(--tests "$work/cuda-tests.xml")
    [ "$sections" = tests ] && suite_args+=(--sections "")
fi

echo "== arjet bench --suite $suite =="
budget=$(python3 -c "print(max(0.5, ($limit_s - $SECONDS) / 60))")
python3 -m arjet bench --suite "$suite" --out "$out" "${suite_args[@]}" --budget-minutes "$budget"
status=$?
rm -rf "$work"
echo "gpu check: ${SECONDS} s in all"
exit $status
