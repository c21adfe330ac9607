"""The demo's own limits: stricter options than the API, a time budget per request, no uploads.

The time budget is measured on a clock the test steps by hand (one 'second' per decode step while the long
request runs, none afterwards), so the test is about steps, never about how fast this machine is.
"""

import httpx
import numpy as np
import PIL.Image
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from arjet.app.request import MAX_OPTION_VALUES, make_request
from arjet.app.ui import build_demo, serve
from arjet.limits import DEMO_LIMITS

from ports import free_port

PROMPT = "a red circle left of a blue square"
BUDGET = 20.0


class SteppingClock:
    """A clock that advances `step` seconds every time it is read."""

    def __init__(self):
        self.now = 0.0
        self.step = 0.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now


@pytest.fixture(scope="module")
def demo():
    clock = SteppingClock()
    blocks = build_demo({"shapes": "shapes"}, max_queue=3, time_limit=BUDGET, clock=clock)
    port = free_port()
    serve(blocks, "127.0.0.1", port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/", clock
    blocks.close()


def _arguments(sampler="ar", options="", seed=0):
    return ("shapes", PROMPT, sampler, options, seed, 3.0, 1.0, 0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("window=65", "window=65 is above this demo's limit of 64"),
        ("window=200000", "window must be an integer from 1 to 16384, got '200000'"),
        ("window=8,window=9", "option window is given twice"),
        ("coupling=maybe", "coupling must be true or false"),
        ("x" * 201, "at most 200"),
    ],
)
def test_oversized_or_malformed_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        make_request(PROMPT, "sjd", options, 0, 3.0, 1.0, 0)
    assert MAX_OPTION_VALUES["window"] == DEMO_LIMITS.max_window == 64


def test_an_oversized_window_is_refused_by_the_served_demo(demo):
    url, _ = demo
    with pytest.raises(AppError, match="window=200000"):
        Client(url, verbose=False).predict(*_arguments("sjd", "window=200000"), api_name="/generate")


def test_a_long_request_is_cancelled_and_the_next_one_completes(demo):
    url, clock = demo
    client = Client(url, verbose=False)
    clock.step = 1.0  # every decode step now takes one 'second': ar's 256 steps cannot fit in 20
    try:
        with pytest.raises(AppError, match="ran past the demo's time budget of 20 s and was stopped"):
            client.predict(*_arguments("ar"), api_name="/generate")
    finally:
        clock.step = 0.0
    image, *_, stats = client.predict(*_arguments("ar", seed=1), api_name="/generate")
    assert np.asarray(PIL.Image.open(image).convert("RGB"), dtype=np.float32).std() > 10
    assert "| `ar` | 256 | 256 |" in stats


def test_uploads_are_refused(demo):
    url, _ = demo
    response = httpx.post(f"{url}gradio_api/upload", files={"files": ("x.txt", b"not wanted", "text/plain")})
    assert response.status_code == 413, response.text
