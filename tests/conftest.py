import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `arjet` runs: a core that turns busy costs little

import pytest  # noqa: E402
import torch  # noqa: E402

from arjet import machine  # noqa: E402
from arjet.pipelines.threads import PROCESS_THREADS  # noqa: E402

# Every pipeline call of the test process runs on one fixed count, as under the command line's `--threads`:
# a call otherwise takes one thread per core other processes leave free, and two calls compared pixel for
# pixel (or code for code) would then round float32 sums differently whenever the machine's load changed
# between them. The count is chosen once, as `arjet` chooses it (one per core other processes leave free,
# at most two), so that the suite beside busy processes runs at the speed of the cores it has. Tests of that
# choice unpin it themselves (tests/pipelines/test_threads.py).
TEST_THREADS = min(2, machine.THREADS.choose())

from families import FAMILIES  # noqa: E402

PROCESS_THREADS.pin(TEST_THREADS)


def pytest_collection_modifyitems(config, items):
    """Tests marked `cuda` skip where there is no CUDA device."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def fixed_threads():
    """The fixed count again after a test that changed it (an in-process `arjet` command pins its own)."""
    yield
    if torch.get_num_threads() != TEST_THREADS or not PROCESS_THREADS.pinned:
        PROCESS_THREADS.pin(TEST_THREADS)


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
