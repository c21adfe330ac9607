#!/usr/bin/env bash
# Second GPU round for the built-in model: continue the AR model from a saved pipeline, then fine-tune
# it for SJD2, both with `arjet train`; results packed into $OUT.
set -euo pipefail
W=/tmp/arjet-train
mkdir -p "$W" "$OUT"
timeout "${AR_TIMEOUT:-230}" python3 -m arjet.cli train ar --device cuda --init "$INIT" --out "$W/ar2" \
    --train-images 200000 --max-minutes "${AR_MINUTES:-2.8}" --batch-size 256 --workers 12 --threads 4 \
    --lr 6e-4 --min-lr 3e-5 --warmup-steps 50 --eval-every 400 2>&1 | grep -v "step/s\]" | tail -3 || true
tail -3 "$W/ar2/train_log.jsonl"
timeout "${SJD2_TIMEOUT:-140}" python3 -m arjet.cli train sjd2 --base "$W/ar2/pipeline" --out "$W/sjd2" \
    --data-cache "$W/ar2/cache" --images 200000 --max-minutes "${SJD2_MINUTES:-1.8}" --batch-size 256 \
    --threads 4 --levels 16 --log-every 100 2>&1 | grep -v "it/s\]" | tail -3 || true
tail -3 "$W/sjd2/train_log.jsonl"
python3 - <<PY
import torch, arjet
for name in ("ar2", "sjd2"):
    pipe = arjet.ARPipeline.from_pretrained("$W/%s/pipeline" % name, dtype=torch.bfloat16)
    pipe.save_pretrained("$W/pack/%s" % name)
PY
cp "$W/ar2/train_log.jsonl" "$W/pack/ar2_log.jsonl"; cp "$W/sjd2/train_log.jsonl" "$W/pack/sjd2_log.jsonl"
tar czf "$W/results.tgz" -C "$W/pack" .
split -b 15M "$W/results.tgz" "$OUT/results.part-"
ls -la "$OUT"
