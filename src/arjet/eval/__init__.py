"""Evaluation: how much faster is each sampler, and what does it cost in quality (`arjet eval`, `arjet bench`).

One module per job (nothing heavy is imported with the package, so `arjet --help` stays fast):

- `prompts` — prompt sets by name or file (`load_prompts`);
- `clip` — CLIP models through open_clip from local files (`load_clip`, the domain-CLIP folder layout);
- `features` — FID feature networks behind one spec registry (`load_feature_network`);
- `reference` — FID's real images: a folder, or the built-in domain's held-out renders;
- `metrics` — FID (torchmetrics) with cached reference statistics, CLIP score;
- `speed` — the per-sampler speed summary (forward passes, ratios against `ar`) bench and eval share;
- `bench`, `floor` — `run_bench`: samplers timed side by side, against the bandwidth floor of a forward;
- `settings`, `records`, `atomic`, `lock` — the run folder: settings, one JSON line per image (only the
  run's own are read), atomic writes, one run at a time;
- `runner` — `run_eval`: generation, resumable and sharded with Accelerate;
- `scoring`, `report` — per-sampler rows, `metrics.json`, `report.md` (with notes on what the figures
  can and cannot say), plots;
- `domain` — the built-in domain's own judge (`arjet domain-report`).

A run folder: `config.json` (the settings), `images/<sampler>/<prompt index>_<seed>.png`,
`records/process-<rank>.jsonl` (written as images finish) and `records.jsonl` (merged), `metrics.json`,
`report.md`, `plots/{speed_quality,accepted_per_step,commit_steps,grid}.png`.
"""
