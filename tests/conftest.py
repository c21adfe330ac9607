import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `arjet` runs: a core that turns busy costs little
# torch's inductor keeps its compiled kernels and a precompiled header in one folder whatever CPU capability
# the process runs at: a header built at the native one, read by a run under ATEN_CPU_CAPABILITY=default,
# fails to compile ("'at::vec' has not been declared"). A folder per capability the suite is run at.
if os.environ.get("ATEN_CPU_CAPABILITY"):
    os.environ.setdefault(
        "TORCHINDUCTOR_CACHE_DIR",
        os.path.join("/tmp", f"torchinductor-arjet-tests-{os.environ['ATEN_CPU_CAPABILITY']}"),
    )

import shutil  # noqa: E402
import tempfile  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from arjet import machine  # noqa: E402
from arjet.pipelines.threads import PROCESS_THREADS  # noqa: E402

# Every pipeline call of a test process runs on one fixed count, as under the command line's `--threads`:
# a call otherwise takes one thread per core other processes leave free, and two calls compared pixel for
# pixel (or code for code) would then round float32 sums differently whenever the machine's load changed
# between them. The count is chosen once per run, as `arjet` chooses it (one per core other processes leave
# free), so that the suite beside busy processes runs at the speed of the cores it has: run alone, the test
# process takes them (at most two); run by pytest-xdist, the controller chooses before it starts its workers
# and each of the N workers takes an Nth of them (at least one), so that N workers never ask for more threads
# than there are free cores (two workers on two cores: one thread each, not four). Tests of that choice unpin
# it themselves (tests/pipelines/test_threads.py).
FREE_CORES_VARIABLE = "ARJET_TEST_FREE_CORES"  # the controller's choice, read by its workers
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get(FREE_CORES_VARIABLE):
    FREE_CORES = int(os.environ[FREE_CORES_VARIABLE])
else:
    FREE_CORES = machine.THREADS.choose()
TEST_THREADS = min(2, max(1, FREE_CORES // WORKERS))

from families import FAMILIES  # noqa: E402

PROCESS_THREADS.pin(TEST_THREADS)


# -- parallel by default ---------------------------------------------------------------------------------
# `python3 -m pytest` runs the tests in one pytest-xdist worker per usable core (`-n auto`), each worker
# taking the next tests of one contiguous share and stealing from the others' when it runs dry
# (`--dist worksteal`): most tests are Python overhead on tiny models, and a module's tests mostly stay on
# one worker, so its module-scoped pipelines are built once. Set here rather than in `addopts`, so that
# `-p no:xdist` (and a machine without xdist) still runs serially, as `-n 0` does; any `-n`, `--dist` or
# `--tx` given on the command line wins.
@pytest.hookimpl(tryfirst=True)  # before xdist's own, which turns `-n` into workers
def pytest_cmdline_main(config):
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    if config.option.numprocesses is None and not config.option.tx:
        config.option.numprocesses = "auto"
        if config.option.dist == "no":
            config.option.dist = "worksteal"


# a worker's peak memory was 2.0 GB (the demo's tests, Chromium included); and room for what tests start
WORKER_BYTES = 3 << 30


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per core this process may use (its affinity mask, as `arjet` counts cores;
    xdist's own count is of physical cores and ignores the mask), as many as the free memory holds.
    `PYTEST_XDIST_AUTO_NUM_WORKERS` wins."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    free = machine.available_bytes("cpu")
    cores = machine.usable_cores()
    return max(1, cores if free is None else min(cores, free // WORKER_BYTES))


def _distributes(config) -> bool:
    """Whether this process is an xdist controller, which only hands tests to its workers."""
    return getattr(config.option, "dist", "no") != "no" and bool(getattr(config.option, "tx", None))


GRADIO_DIR = pytest.StashKey[tuple[str, str | None]]()  # (this process's folder, GRADIO_TEMP_DIR before)


def pytest_configure(config):
    if _distributes(config):  # its workers start after this: they share out the cores it found free
        os.environ[FREE_CORES_VARIABLE] = str(FREE_CORES)
        return
    # Gradio's servers cache the images they hand out in one folder shared by every process (/tmp/gradio),
    # written in place under the image's hash: a process serving an image another one is writing (two
    # workers running the demo's tests on the same prompt and seed) could hand out half a file. Each test
    # process gets a folder of its own (inside GRADIO_TEMP_DIR where that is set), which Gradio makes when
    # it first caches a file, removed at the process's end.
    before = os.environ.get("GRADIO_TEMP_DIR")
    folder = os.path.join(before or tempfile.gettempdir(), f"arjet-tests-gradio-{uuid.uuid4().hex}")
    config.stash[GRADIO_DIR] = (folder, before)
    os.environ["GRADIO_TEMP_DIR"] = folder


def pytest_unconfigure(config):
    if GRADIO_DIR not in config.stash:
        return
    folder, before = config.stash[GRADIO_DIR]
    shutil.rmtree(folder, ignore_errors=True)
    if before is None:
        os.environ.pop("GRADIO_TEMP_DIR", None)
    else:
        os.environ["GRADIO_TEMP_DIR"] = before


# -- the fast lane ----------------------------------------------------------------------------------------
# `pytest -m "not slow"` runs every package's quick tests in a few minutes; the whole suite (what CI runs)
# runs these too. They are named here, by file or as `file::test` (every parameter of it), rather than
# marked in each file: a test is in the fast lane unless this table (or its own `@pytest.mark.slow`) says
# otherwise.
TESTS = Path(__file__).resolve().parent
SLOW = frozenset(
    {
        # statistical: chi-square tests of a sampler's codes against the exact distribution, and their controls
        "samplers/test_lossless.py",
        "samplers/test_speculative.py::test_simulated_speculative_step_matches_the_target",
        "samplers/test_speculative.py::test_point_mass_drafts_match_the_target",
        "samplers/test_speculative.py::test_negative_control_wrong_speculative_steps_are_rejected",
        "samplers/test_speculative.py::test_coupled_redraft_has_marginal_p_and_is_maximally_coupled",
        "samplers/test_speculative.py::test_negative_control_coupling_without_the_residual_is_rejected",
        "samplers/test_sjd_pac.py::test_recursive_rejection_over_siblings_gives_exactly_the_target",
        "samplers/test_sjd_pac.py::test_negative_control_a_wrong_sibling_rule_is_rejected",
        "samplers/test_sjd_pac.py::test_siblings_from_another_proposal_give_exactly_the_target",
        "samplers/test_sjd_pac.py::test_negative_control_siblings_declared_drawn_from_the_main_proposal_are_rejected",
        "samplers/test_sjd2.py::test_sjd2_is_lossless_with_respect_to_the_noise_conditioned_model",
        "samplers/test_lantern.py::test_the_tv_form_keeps_every_token_within_delta_of_p_on_a_model",
        "engine/test_adaptive_mode.py",
        "pipelines/test_janus_reference.py::test_sampling_distribution_matches_transformers_generate",
        # golden: every sampler on every family's tiny pipeline and the built-in models, code for code
        "samplers/test_golden.py",
        # subprocesses: a fresh interpreter, `arjet` killed midway, processes under accelerate
        "cli/test_main.py::test_help_imports_nothing_heavy",
        "cli/test_main.py::test_python_m_arjet_is_the_command_line",
        "cli/test_threads.py::test_the_process_entry_makes_openmp_wait_passively_before_torch_loads",
        "eval/test_run_folder.py::test_a_second_eval_into_a_busy_folder_is_refused_before_any_work",
        "eval/test_runner.py::test_a_run_killed_midway_and_resumed_equals_an_uninterrupted_run",
        "eval/test_runner.py::test_a_batched_run_keeps_its_lanes_full_and_equals_one_image_at_a_time",
        "eval/test_runner.py::test_two_processes_under_accelerate_launch_equal_one_process",
        "test_package.py::test_parts_are_attributes_after_a_bare_import",
        "train/test_workers.py",
        # training: every stage for a few steps
        "train/test_stages.py",
        "train/test_drafter_training.py",
        "train/test_sjd2_training.py",
        # end to end: the demo served and driven by a client or a browser, a request left to time out
        "app/test_ui.py",
        "app/test_browser.py",
        "app/test_limits.py::test_a_long_request_is_cancelled_and_the_next_one_completes",
        # the notebooks (a kernel each; the docs site builds in seconds and stays in the fast lane)
        "test_notebooks.py::test_a_notebook_runs_offline_on_the_built_in_model",
    }
)


def listed_slow(item) -> bool:
    """Whether the fast lane's table names this test: its file, or `file::name` (without parameters)."""
    try:
        path = item.path.relative_to(TESTS).as_posix()
    except ValueError:  # a test outside tests/
        return False
    return path in SLOW or f"{path}::{getattr(item, 'originalname', item.name)}" in SLOW


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    """The fast lane's table marks its tests `slow`; tests marked `cuda` skip where there is no CUDA
    device."""
    slow = pytest.mark.slow
    for item in items:
        if listed_slow(item):
            item.add_marker(slow)
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
