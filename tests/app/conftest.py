import os

import pytest

from ports import free_port

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


@pytest.fixture(scope="package")
def served_demo():
    """The demo over the built-in models, served on loopback for the whole package; yields its URL.

    Without the demo's wall-clock time budget: its tests are about streaming, comparing and errors, and a
    budget in seconds (and the engine's refusals estimated from it) would fail them on a slow or busy
    machine (a compare took 64 s beside another test worker and a full suite run). The budget has its own
    tests, on a clock they step (test_limits.py)."""
    from arjet.app.ui import build_demo, serve

    demo = build_demo(max_queue=3, time_limit=None)
    port = free_port()
    serve(demo, "127.0.0.1", port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    demo.close()
