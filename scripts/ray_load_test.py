#!/usr/bin/env python3
"""Load test of `arjet serve --ray`: REQUESTS requests from CLIENTS `openai` clients against REPLICAS CPU
replicas of the built-in model on a local Ray instance, one replica killed by pid mid-run (--kill).

    python scripts/ray_load_test.py --requests 200 --clients 16 --replicas 2 --kill --check 40

Starts Ray (`--cpus` logical CPUs, no dashboard), deploys the app (`arjet.serve.ray_app`, each replica on
one torch thread), sends every request once (request `i` with seed `i`) and reports, as one JSON object:
the answers by kind (an image, 429), none lost or answered twice, images equal to their solo decode
(`pipe(prompt, seed=i, threads=1)`, for the first `--check` images), requests per second, p50 / p95 latency
of the served ones, the start-up time, and with --kill the killed pid, the replicas' pids after, what
`GET /health` said while a replica was missing and the seconds until it showed every replica alive again.
docs/ray.md holds its figures.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import signal
import statistics
import threading
import time

import httpx
import numpy as np
import PIL.Image
from load_clients import PROMPT, generate, send_all

from arjet.limits import EngineConfig
from arjet.serve import ray_app


def pids(deployment: str, want: int, serve) -> set[int]:
    handle = serve.get_deployment_handle(deployment, app_name=ray_app.APP_NAME)
    found: set[int] = set()
    deadline = time.monotonic() + 300
    while len(found) < want and time.monotonic() < deadline:
        found.add(handle.pid.remote().result())
    return found


def watch_health(url: str, report: dict) -> None:
    """From a replica's death on: `GET /health` every 0.5 s until every replica is alive again; what it said
    first while one was missing, and how long the replacement took."""
    began = time.perf_counter()
    while True:
        engine = httpx.get(f"{url}/health", timeout=30).json()["deployments"]["engine-shapes"]
        if engine["alive"] < engine["target"]:
            report.setdefault("health_while_replacing", engine)
        elif "health_while_replacing" in report and engine["status"] == "HEALTHY":
            break
        time.sleep(0.5)
    report["replaced_after_seconds"], report["health_after"] = round(time.perf_counter() - began, 1), engine


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--lanes", type=int, default=4)
    parser.add_argument("--max-queue", type=int, default=16)
    parser.add_argument("--sampler", default="mc-sjd")
    parser.add_argument("--check", type=int, default=40, help="images compared with their solo decode")
    parser.add_argument("--kill", action="store_true", help="kill one replica's process a quarter of the way")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()

    import ray
    from ray import serve

    started = time.perf_counter()
    ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    config = EngineConfig(lanes=args.lanes, max_queue=args.max_queue, compile=False)
    replicas = ray_app.Replicas(count=args.replicas, num_cpus=args.cpus / args.replicas)
    app = ray_app.build_app({"shapes": ray_app.ServedModel("shapes")}, config, replicas, threads=1)
    ray_app.run(app, "127.0.0.1", args.port, blocking=False)
    url = f"http://127.0.0.1:{args.port}"
    report: dict = {"startup_seconds": round(time.perf_counter() - started, 1), **vars(args)}
    before = pids("engine-shapes", args.replicas, serve)

    replaced = threading.Thread(target=watch_health, args=(url, report))

    def kill_one(answers) -> None:
        answers.wait_for(args.requests // 4)
        killed = min(before)
        os.kill(killed, signal.SIGKILL)
        report["killed_pid"] = killed
        replaced.start()

    recorded, elapsed = send_all(
        url,
        args.requests,
        args.clients,
        lambda api, request_id: generate(api, "shapes", request_id, args.sampler),
        timeout=900,
        during=kill_one if args.kill else None,
    )
    answers = recorded.by_id
    images = {i: a for i, a in answers.items() if isinstance(a, str)}
    served = sorted(recorded.seconds[i] for i in images)
    report.update(
        answered=len(answers),
        lost=args.requests - len(answers),
        duplicates=len(recorded.duplicates),
        images=len(images),
        refused_429=sum(a == 429 for a in answers.values()),
        other_errors=sorted({a for a in answers.values() if isinstance(a, int) and a != 429}),
        seconds=round(elapsed, 1),
        requests_per_second=round(args.requests / elapsed, 2),
        images_per_second=round(len(images) / elapsed, 2),
        p50_seconds=round(statistics.median(served), 2) if served else None,
        p95_seconds=round(served[int(0.95 * (len(served) - 1))], 2) if served else None,
    )
    if args.kill:
        replaced.join()
        after = pids("engine-shapes", args.replicas, serve)
        report["replica_pids_before"], report["replica_pids_after"] = sorted(before), sorted(after)

    from arjet.builtin import load_model

    pipe = load_model("shapes", device="cpu")
    pipe.set_progress_bar_config(disable=True)
    checked = sorted(images)[: args.check]
    equal = 0
    for request_id in checked:
        served_image = np.asarray(
            PIL.Image.open(io.BytesIO(base64.b64decode(images[request_id]))).convert("RGB")
        )
        alone = pipe(PROMPT, seed=request_id, sampler=args.sampler, threads=1).images[0].convert("RGB")
        equal += bool(np.array_equal(served_image, np.asarray(alone)))
    report["checked_equal_to_solo"] = f"{equal}/{len(checked)}"
    print(json.dumps(report, indent=1))
    serve.shutdown()
    ray.shutdown()
    ok = (
        report["lost"] == 0
        and not recorded.duplicates
        and equal == len(checked)
        and not report["other_errors"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
