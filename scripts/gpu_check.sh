#!/usr/bin/env bash
# The GPU check, as one command: the CUDA tests (captured vs eager codes), then `arjet bench --suite gpu`
# (the graph floor, real-size architectures with random weights, the built-in models, batch 8), into one
# folder: report.md, report.json and log.txt. Under 9 minutes on one H100.
#
#   bash scripts/gpu_check.sh OUT [SUITE [ARGS...]]   # SUITE: gpu (default) or gpu-quick; ARGS go to the
#                                                    # suite, e.g. --sections emu3-gen (tests then skipped)
#
# On a GPU machine without network access, with torch installed: wheels of what else arjet needs
# (transformers, diffusers, ...) in .whl/ at the repository's root are installed into a temporary folder
# first, and arjet runs from src/ when it is not installed.
set -uo pipefail
out=${1:?usage: bash scripts/gpu_check.sh OUT [gpu|gpu-quick]}
suite=${2:-gpu}
shift $(( $# < 2 ? $# : 2 ))
limit_s=${GPU_CHECK_SECONDS:-530}  # the whole check, tests included
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

tests=()
if [ $# -eq 0 ]; then
    echo "== CUDA tests =="
    timeout 240 python3 -m pytest -m cuda -q -p no:cacheprovider --junitxml "$work/cuda-tests.xml" \
        tests/samplers tests/session tests/engine tests/bench/test_floor.py tests/bench/test_suite.py
    tests=(--tests "$work/cuda-tests.xml")
fi

echo "== arjet bench --suite $suite =="
budget=$(python3 -c "print(max(0.5, ($limit_s - $SECONDS) / 60))")
python3 -m arjet bench --suite "$suite" --out "$out" ${tests[@]+"${tests[@]}"} --budget-minutes "$budget" "$@"
status=$?
rm -rf "$work"
echo "gpu check: ${SECONDS} s in all"
exit $status
