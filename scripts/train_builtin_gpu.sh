#!/usr/bin/env bash
# Trains the built-in model's VQ tokenizer and AR model on one CUDA GPU, with the same `arjet train`
# commands as on CPU (only bigger batches and the device differ), and packs the results into $OUT.
# Used on a lent H100 for the shipped model; see README "The built-in model" for the CPU recipe.
set -euo pipefail
OUT=${OUT:-runs/gpu}
WORK=${WORK:-/tmp/arjet-train}
mkdir -p "$OUT" "$WORK"
export PYTHONPATH="$PWD/src:${PYTHONPATH:-}"
arjet() { python3 -m arjet.cli "$@"; }

start=$(date +%s)
arjet train vq --device cuda --out "$WORK/vq" --max-minutes "${VQ_MINUTES:-3}" --batch-size 128 \
    --workers 12 --threads 4 --log-every 200 --lr 4e-4
echo "vq done after $(( $(date +%s) - start )) s"
timeout "${AR_TIMEOUT:-330}" python3 -m arjet.cli train ar --device cuda --vq "$WORK/vq" --out "$WORK/ar" \
    --train-images 200000 --max-minutes "${AR_MINUTES:-4}" --batch-size 256 --workers 12 --threads 4 \
    --eval-every 500 || echo "ar stopped by its timeout"
echo "ar done after $(( $(date +%s) - start )) s"
tar czf "$WORK/results.tgz" -C "$WORK" vq ar/pipeline ar/metrics.json ar/train_log.jsonl ar/train_config.json
split -b 15M "$WORK/results.tgz" "$OUT/results.part-"
ls -la "$OUT"
