"""Codes per target forward on the built-in model with its shipped drafter: 8 held-out prompts, seeds 0-7.

PYTHONPATH=src python scripts/measure_drafter.py sjd eagle eagle2 sjd-pac "lantern++:drafter=true,lam=5,k=10"
DRAFTER=path/to/drafter python scripts/measure_drafter.py eagle2      # another drafter than the shipped one
"""

import json
import os
import sys
import time

import torch

import arjet
from arjet.data import heldout_set

torch.set_num_threads(1)
pipe = arjet.load()
if os.environ.get("DRAFTER"):
    pipe.register_modules(drafter=arjet.Drafter.from_pretrained(os.environ["DRAFTER"]))
pipe.set_progress_bar_config(disable=True)
prompts = [item["prompt"] for item in heldout_set(8)]
for spec in sys.argv[1:]:
    start = time.time()
    out = pipe(prompts, sampler=spec, seed=list(range(8)), output_type="latent")
    tokens = sum(s.tokens for s in out.stats)
    passes = sum(s.forward_passes for s in out.stats)
    drafted = sum(s.extra.get("drafter_forwards", 0) for s in out.stats)
    record = {
        "sampler": spec,
        "images": len(prompts),
        "tokens": tokens,
        "target_forwards": passes,
        "codes_per_forward": round(tokens / passes, 3),
        "drafter_forwards": drafted,
        "seconds": round(time.time() - start, 1),
    }
    print(json.dumps(record), flush=True)
