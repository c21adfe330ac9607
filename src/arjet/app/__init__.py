"""arjet's web demo: watch a sampler fill in the image, see where drafts were accepted, compare with `ar`.

`arjet app --host 127.0.0.1 --port 7860` serves it; `build_demo(models)` returns the `gr.Blocks` for
embedding or testing. Gradio is imported only when the demo is built.
"""

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def __getattr__(name: str):
    if name == "build_demo":
        from .ui import build_demo

        return build_demo
    raise AttributeError(f"module 'arjet.app' has no attribute {name!r}")
