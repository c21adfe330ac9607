"""Speed: samplers timed side by side, many images at once through the engine, and the GPU suites
(`arjet bench`).

One module per job (nothing heavy is imported with the package, so `arjet --help` stays fast):

- `samplers` — `run_bench`: samplers timed side by side on the same prompts and seeds, ratios against `ar`;
- `floor` — the bandwidth floor of one decoding forward, and the graph floor (a minimal decoder in one
  CUDA graph);
- `speed` — the per-sampler speed summary (forward passes, ratios against `ar`) that `arjet bench` and
  `arjet eval` share;
- `throughput` — `run_throughput`: images per second, latency and lane use through the engine at several
  levels of concurrency;
- `suite` — fixed lists of measurements (`--suite gpu`, `gpu-quick`), each section in a child process, and
  one report against targets.

Prompts come from `arjet.data.prompts`; this part imports nothing from `arjet.eval` (which imports `speed`).
"""
