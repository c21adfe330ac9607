"""What the load-test scripts share: requests `0 .. N-1` (request `i` with seed `i`) sent by concurrent
`openai` clients over HTTP, each answer recorded once, with how long it took.

`scripts/serve_load_test.py` (`arjet serve`) and `scripts/ray_load_test.py` (`arjet serve --ray`) import it
from this folder.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import openai

PROMPT = "a red circle left of a blue square"


class Answers:
    """Each request's answer (a base64 PNG, the HTTP status of a refusal, or what the sender says), the
    seconds it took, and the ids answered more than once (none, when the server answers each once)."""

    def __init__(self) -> None:
        self.by_id: dict[int, object] = {}
        self.seconds: dict[int, float] = {}
        self.duplicates: list[int] = []
        self._changed = threading.Condition()

    def record(self, request_id: int, answer: object, seconds: float) -> None:
        with self._changed:
            if request_id in self.by_id:
                self.duplicates.append(request_id)
            self.by_id[request_id] = answer
            self.seconds[request_id] = seconds
            self._changed.notify_all()

    def wait_for(self, count: int) -> None:
        """Until `count` requests have been answered."""
        with self._changed:
            self._changed.wait_for(lambda: len(self.by_id) >= count)


def generate(api: openai.OpenAI, model: str, request_id: int, sampler: str) -> object:
    """One image of `PROMPT` with seed `request_id`: its base64 PNG, or the HTTP status of the error."""
    try:
        out = api.images.generate(
            model=model,
            prompt=PROMPT,
            response_format="b64_json",
            extra_body={"seed": request_id, "sampler": sampler},
        )
    except openai.APIStatusError as error:  # 429 (refused at once), 504 (ran out of time), ...
        return error.status_code
    return out.data[0].b64_json


def send_all(
    url: str,
    requests: int,
    clients: int,
    send: Callable[[openai.OpenAI, int], object],
    *,
    timeout: float,
    during: Callable[[Answers], None] | None = None,
) -> tuple[Answers, float]:
    """Requests `0 .. requests-1`, request `i` by client `i % clients` (each its own `openai` client of the
    server at `url`, no retries) through `send(api, i)`; `during(answers)` runs in this thread while they
    are sent. The answers, and the seconds from the first request sent to the last answered."""
    answers = Answers()

    def client(ids: range) -> None:
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=timeout)
        for request_id in ids:
            sent = time.perf_counter()
            answer = send(api, request_id)
            answers.record(request_id, answer, time.perf_counter() - sent)

    began = time.perf_counter()
    threads = [threading.Thread(target=client, args=(range(c, requests, clients),)) for c in range(clients)]
    for thread in threads:
        thread.start()
    if during is not None:
        during(answers)
    for thread in threads:
        thread.join()
    return answers, time.perf_counter() - began
