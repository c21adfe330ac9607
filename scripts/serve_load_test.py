#!/usr/bin/env python3
"""Load test of `arjet serve`: REQUESTS requests from CLIENTS concurrent `openai` clients over loopback.

    python scripts/serve_load_test.py --requests 200 --clients 16 --lanes 8 --max-queue 16 --check 200

Starts `arjet serve` (the built-in model) in a process of its own, sends every request once (request `i`
with seed `i`), and reports: answers by kind (an image; 429, refused at once; 504, admitted but out of time:
the admission's misestimates) and how long each kind took, none lost or duplicated, images equal to their solo decode (`pipe(prompt, seed=i)`, for the first `--check` of them),
requests per second, p50 / p95 latency of the served ones, and the server's peak resident memory. A client
that disconnects mid-decode (every 10th request, with a short timeout) must not stop the server.
The issue-33 burst (the server's defaults, 320 requests 160 at a time, on a busy CPU):

    python scripts/serve_load_test.py --requests 320 --clients 160 --max-queue 64 --no-disconnects --check 0
"""

from __future__ import annotations

import argparse
import base64
import collections
import io
import os
import socket
import statistics
import subprocess
import sys
import time

import httpx
import numpy as np
import PIL.Image
from load_clients import PROMPT, generate, send_all


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--lanes", type=int, default=8)
    parser.add_argument("--max-queue", type=int, default=16)
    parser.add_argument("--sampler", default="mc-sjd")
    parser.add_argument(
        "--time-limit", type=float, default=None, help="the server's --time-limit (its default)"
    )
    parser.add_argument("--disconnects", action=argparse.BooleanOptionalAction, default=True,
                        help="every 10th client gives up mid-decode")  # fmt: skip
    parser.add_argument("--check", type=int, default=50, help="compare this many images with solo decodes")
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads of the server and of the solo decodes (default 1)"
    )
    args = parser.parse_args()

    port = free_port()
    command = [sys.executable, "-m", "arjet", "serve", "--port", str(port), "--lanes", str(args.lanes),
               "--max-queue", str(args.max_queue)]  # fmt: skip
    command += ["--threads", str(args.threads)]  # floats, so images, are bit-equal only at equal threads
    if args.time_limit is not None:
        command += ["--time-limit", str(args.time_limit)]
    server = subprocess.Popen(command, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)

        def send(api, request_id: int) -> object:
            if args.disconnects and request_id % 10 == 9:  # a client that gives up mid-decode
                try:
                    httpx.post(f"{url}/v1/images/generations", json={"prompt": PROMPT, "seed": request_id,
                               "sampler": args.sampler}, timeout=0.05)  # fmt: skip
                    return "finished before the disconnect"
                except httpx.TimeoutException:
                    return "disconnected"
            return generate(api, "shapes", request_id, args.sampler)

        recorded, seconds = send_all(url, args.requests, args.clients, send, timeout=600)
        alive = httpx.get(f"{url}/health", timeout=10).json()
        rss = peak_rss_mb(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=60)

    answers, duplicates = recorded.by_id, recorded.duplicates
    images = {i: a for i, a in answers.items() if isinstance(a, str) and len(a) > 100}
    latencies = [recorded.seconds[i] for i in images]
    waits: dict[int, list[float]] = collections.defaultdict(list)
    for request_id, answer in answers.items():
        if isinstance(answer, int):
            waits[answer].append(recorded.seconds[request_id])
    kinds = {
        "image": len(images),
        **{str(code): len(waits[code]) for code in sorted(waits)},
        "disconnected": sum(a == "disconnected" for a in answers.values()),
        "finished before the disconnect": sum(
            a == "finished before the disconnect" for a in answers.values()
        ),
    }
    for code in sorted(waits):
        print(f"{code}: answered after a median of {statistics.median(waits[code]):.2f} s, "
              f"the longest {max(waits[code]):.2f} s")  # fmt: skip
    lost = sorted(set(range(args.requests)) - set(answers))
    print(f"{args.requests} requests from {args.clients} clients in {seconds:.1f} s: {kinds}")
    print(f"lost: {lost or 'none'}; answered twice: {duplicates or 'none'}; server after: {alive['status']}")
    if latencies:
        q = statistics.quantiles(latencies, n=20)
        print(
            f"served: {len(latencies) / seconds:.2f} images/s, p50 {statistics.median(latencies):.2f} s, "
            f"p95 {q[18]:.2f} s; server peak RSS {rss:.0f} MB"
        )
    if args.check:
        import torch

        import arjet

        torch.set_num_threads(args.threads)
        pipe = arjet.load()
        pipe.set_progress_bar_config(disable=True)
        checked = sorted(images)[: args.check]
        mismatches = [i for i in checked if not np.array_equal(
            np.asarray(PIL.Image.open(io.BytesIO(base64.b64decode(images[i]))).convert("RGB")),
            np.asarray(pipe(PROMPT, seed=i, sampler=args.sampler).images[0].convert("RGB")))]  # fmt: skip
        print(
            f"{len(checked)} images compared with their solo decodes: {len(mismatches)} differ {mismatches}"
        )
    return 0 if not lost and not duplicates else 1


if __name__ == "__main__":
    sys.exit(main())
