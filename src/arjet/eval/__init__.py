"""Evaluation: what each sampler costs in quality, and how much faster it is (`arjet eval`).

One module per job (nothing heavy is imported with the package, so `arjet --help` stays fast):

- `clip` — CLIP models through open_clip from local files (`load_clip`, the domain-CLIP folder layout);
- `features` — FID feature networks behind one spec registry (`load_feature_network`);
- `reference` — FID's real images: a folder, or the built-in domain's held-out renders;
- `metrics` — FID (torchmetrics) with cached reference statistics, CLIP score;
- `settings`, `records`, `atomic`, `lock` — the run folder: settings, one JSON line per image (only the
  run's own are read), atomic writes, one run at a time;
- `runner` — `run_eval`: generation, resumable and sharded with Accelerate;
- `scoring`, `report` — per-sampler rows, `metrics.json`, `report.md` (with notes on what the figures
  can and cannot say), plots;
- `domain` — the built-in domain's own judge (`arjet domain-report`).

The prompt sets are `arjet.data.prompts`; the speed figures (forward passes, ratios against `ar`) are
`arjet.bench.speed`'s, the same summary `arjet bench` reports.

A run folder: `config.json` (the settings), `images/<sampler>/<prompt index>_<seed>.png`,
`records/process-<rank>.jsonl` (written as images finish) and `records.jsonl` (merged), `metrics.json`,
`report.md`, `plots/{speed_quality,accepted_per_step,commit_steps,grid}.png`.
"""
