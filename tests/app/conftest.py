import os

import pytest

from ports import free_port

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


@pytest.fixture(scope="package")
def served_demo():
    """The demo over the built-in models, served on loopback for the whole package; yields its URL."""
    from arjet.app.ui import build_demo, serve

    demo = build_demo(max_queue=3)
    port = free_port()
    serve(demo, "127.0.0.1", port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    demo.close()
