import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))

from families import FAMILIES  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """Tests marked `cuda` skip where there is no CUDA device."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(params=FAMILIES)
def family(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def builtin_pipe():
    """The built-in shapes pipeline (float32, CPU), loaded once for every test that needs it."""
    import arjet

    pipe = arjet.load()
    pipe.set_progress_bar_config(disable=True)
    return pipe
