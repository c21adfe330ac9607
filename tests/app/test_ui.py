"""The demo served on 127.0.0.1 and driven through its API with gradio_client: streaming, compare, errors."""

import numpy as np
import PIL.Image
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

PROMPT = "a red circle left of a blue square"


@pytest.fixture(scope="module")
def client(served_demo):
    return Client(served_demo, verbose=False)


def _arguments(prompt=PROMPT, sampler="sjd", options="", seed=0, guidance=3.0, temperature=1.0, top_k=0):
    return ("shapes", prompt, sampler, options, seed, guidance, temperature, top_k)


def _pixels(path) -> np.ndarray:
    return np.asarray(PIL.Image.open(path).convert("RGB"), dtype=np.float32)


def test_generate_streams_the_canvas_then_the_heat_map_and_stats(client):
    job = client.submit(*_arguments(sampler="sjd", options="window=8"), api_name="/generate")
    image, baseline, heat, stats = job.result()
    frames = job.outputs()
    assert len(frames) >= 3, "expected intermediate canvases before the final image"
    first_canvas = _pixels(frames[0][0])
    assert (np.abs(first_canvas - 128).max(-1) <= 1).mean() > 0.5, "an early canvas is mostly undecoded grey"
    assert all(frame[2] is None for frame in frames[:-1]), "the heat map comes only at the end"
    final = _pixels(image)
    assert final.shape == (320, 320, 3) and final.std() > 10
    assert baseline is None and _pixels(heat).std() > 10
    assert "`sjd:window=8`" in stats and "| 256 |" in stats


def test_compare_shows_the_sampler_next_to_ar(client):
    image, baseline, heat, stats = client.predict(
        *_arguments(sampler="zipar", options="w=4"), api_name="/compare"
    )
    assert _pixels(image).std() > 10 and _pixels(baseline).std() > 10
    assert "`zipar:w=4`" in stats and "| `ar` | 256 | 256 | 1.00x |" in stats
    assert "fewer forward passes than `ar`" in stats


def test_compare_with_ar_chosen_runs_ar_once(client):
    image, baseline, heat, stats = client.predict(*_arguments(sampler="ar"), api_name="/compare")
    assert _pixels(image).std() > 10 and baseline is None
    assert stats.count("| `ar` |") == 1


def test_an_unexpected_failure_gives_a_message_and_the_server_keeps_serving(client, monkeypatch):
    from arjet.app import ui

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(ui, "_frames", broken)
    with pytest.raises(AppError, match=r"generation failed \(RuntimeError\); please try again"):
        client.predict(*_arguments(), api_name="/generate")
    monkeypatch.undo()
    image, *_ = client.predict(*_arguments(sampler="ar", seed=2), api_name="/generate")
    assert _pixels(image).std() > 10


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(prompt=""), "The prompt is empty"),
        (dict(prompt="a red circle " * 40), "at most 300 are allowed"),
        (dict(options="window=0"), "Bad sampler options"),
        (dict(sampler="sjd2"), "sjd2 needs a checkpoint fine-tuned"),
        (dict(temperature=9.0), "temperature must be a finite number from 0 to 5, got 9.0"),
        (dict(top_k=1.5), "top_k must be an integer from 0 to 1000000, got 1.5"),
        (dict(seed=2.5), "seed must be an integer from 0 to 2147483647, got 2.5"),
    ],
)
def test_bad_input_gives_a_message_and_the_server_keeps_serving(client, changes, message):
    with pytest.raises(AppError, match=message):
        client.predict(*_arguments(**changes), api_name="/generate")
    image, *_ = client.predict(*_arguments(sampler="ar", seed=1), api_name="/generate")
    assert _pixels(image).std() > 10


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(temperature="hot"), "temperature must be a finite number from 0 to 5, got 'hot'"),
        (dict(seed="x"), "seed must be an integer from 0 to 2147483647, got 'x'"),
        (dict(top_k="k"), "top_k must be an integer from 0 to 1000000, got 'k'"),
        (dict(guidance=[3]), r"guidance_scale must be a finite number from 0 to 20, got \[3\]"),
        (dict(prompt=5), "The prompt must be text, got int: 5"),
        (dict(options=["window=8"]), "The sampler options must be text"),
        (dict(sampler=5), "Unknown sampler 5"),
        (dict(model=["shapes"]), r"Unknown model \['shapes'\]"),
    ],
)
def test_api_fields_of_the_wrong_type_are_named(client, arguments, message):
    """The page's API gets the field's name, not Gradio's generic error for a value it cannot convert."""
    fields = dict(arguments)
    model = fields.pop("model", "shapes")
    with pytest.raises(AppError, match=message):
        client.predict(model, *_arguments(**fields)[1:], api_name="/generate")


def test_the_sliders_range_is_the_demos_limit():
    from arjet.app.request import DEMO_SAMPLING_RANGES
    from arjet.app.ui import build_demo

    demo = build_demo({"shapes": "shapes"})
    sliders = {block.label: block for block in demo.blocks.values() if type(block).__name__ == "Slider"}
    assert (
        sliders["Temperature (0 = greedy)"].minimum,
        sliders["Temperature (0 = greedy)"].maximum,
    ) == DEMO_SAMPLING_RANGES["temperature"]
    assert (sliders["CFG scale"].minimum, sliders["CFG scale"].maximum) == DEMO_SAMPLING_RANGES[
        "guidance_scale"
    ]


def test_a_request_the_engine_expects_to_finish_too_late_gets_a_clear_message(monkeypatch):
    import gradio as gr

    from arjet.app import ui
    from arjet.engine import Engine, Overloaded

    def overloaded(self, *args, **kwargs):
        raise Overloaded("expected 42 s", retry_after=7.0, expected_wait=42.0)

    monkeypatch.setattr(Engine, "submit", overloaded)
    shelf = ui.ModelShelf({"shapes": "shapes"})
    try:
        run = ui._run(shelf, "shapes", _arguments()[1:], False, lambda *a, **k: None, 300, ui.Budget(30.0))
        with pytest.raises(gr.Error) as refused:
            list(run)
    finally:
        shelf.close()
    assert refused.value.message == (
        "The demo is busy: your image would take about 42 s, past its time budget of 30 s; "
        "please try again in 7 s."
    )


def test_words_the_model_does_not_know_are_named_on_the_page(client):
    *_, stats = client.predict(
        *_arguments(prompt="a red heart left of a blue square", sampler="ar"), api_name="/generate"
    )
    assert "The model does not know 'heart'" in stats
    *_, stats = client.predict(*_arguments(sampler="ar"), api_name="/generate")
    assert "does not know" not in stats


@pytest.mark.slow
def test_a_burst_of_requests_is_bounded_by_the_queue(client):
    jobs = [client.submit(*_arguments(sampler="ar", seed=i), api_name="/generate") for i in range(10)]
    served, refused = 0, 0
    for job in jobs:
        try:
            job.result()
            served += 1
        except Exception as error:  # gradio_client reports a full queue as QueueError
            assert "Queue is full" in str(error)
            refused += 1
    assert served >= 1 and refused >= 1
    image, *_ = client.predict(*_arguments(sampler="ar", seed=2), api_name="/generate")
    assert _pixels(image).std() > 10


def test_examples_use_only_words_the_built_in_model_knows(builtin_pipe):
    from arjet.app.ui import EXAMPLES
    from arjet.pipelines.prompts import unknown_words

    for example in EXAMPLES:
        assert unknown_words(builtin_pipe.tokenizer, example) == [], example


def test_a_refused_request_is_one_line_in_the_server_log(caplog, capfd):
    import gradio as gr

    from arjet.app import ui

    shelf = ui.ModelShelf({"shapes": "shapes"})
    requests = ui._run(
        shelf, "shapes", _arguments(prompt="")[1:], False, lambda *a, **k: None, 300, ui.Budget(None)
    )
    with caplog.at_level("WARNING", logger="arjet.app.ui"), pytest.raises(gr.Error) as refused:
        next(requests)
    assert refused.value.print_exception is False  # gradio prints no traceback for it
    (record,) = caplog.records
    assert (
        record.getMessage().startswith("request refused: The prompt is empty")
        and "\n" not in record.getMessage()
    )


def test_option_hints_come_from_the_registry():
    from arjet import samplers
    from arjet.app import ui

    assert ui._option_hint("sjd") == "window=16, init=random, coupling=false, reuse=none, acceptance=exact"
    assert ui._option_hint("ar") == "" and all(
        ui._option_hint(name) is not None for name in samplers.available()
    )


def test_each_model_is_offered_only_the_samplers_it_can_run(builtin_pipe):
    import arjet
    from arjet.app.ui import sampler_choices

    plain = sampler_choices(builtin_pipe)
    assert "sjd2" not in plain and {"ar", "sjd", "zipar", "lantern", "eagle"} <= set(
        plain
    )  # it has a drafter
    fine_tuned = sampler_choices(arjet.load("shapes-sjd2"))
    drafted = {"eagle", "eagle2", "cool-sd"}
    assert "sjd2" in fine_tuned and not drafted & set(fine_tuned) and set(plain) - drafted < set(fine_tuned)


@pytest.mark.slow
def test_concurrent_visitors_share_the_engine_and_get_their_own_images(builtin_pipe):
    """Two visitors at once (and a comparison, whose two images decode together): their images decode side
    by side in the model's engine, each the one `pipe(prompt, seed=...)` makes alone."""
    from arjet.app.ui import _enlarge, build_demo, serve

    from ports import free_port

    demo = build_demo({"shapes": "shapes"}, max_queue=4, lanes=2)
    port = free_port()
    serve(demo, "127.0.0.1", port, prevent_thread_lock=True, quiet=True)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        jobs = [client.submit(*_arguments(sampler="ar", seed=seed), api_name="/generate") for seed in (5, 6)]
        compared = client.submit(*_arguments(sampler="mc-sjd", seed=7), api_name="/compare")
        images = [job.result()[0] for job in jobs]
        mine, ar, *_ = compared.result()
        stats = demo.shelf.engine("shapes").stats
    finally:
        demo.close()
        demo.shelf.close()
    assert stats.images == 4 and stats.busy_lane_steps > stats.steps  # some steps decoded several images
    for path, seed, sampler in (
        (images[0], 5, "ar"),
        (images[1], 6, "ar"),
        (mine, 7, "mc-sjd"),
        (ar, 7, "ar"),
    ):
        alone = _enlarge(builtin_pipe(PROMPT, sampler=sampler, seed=seed).images[0])
        assert np.array_equal(_pixels(path), np.asarray(alone.convert("RGB"), dtype=np.float32))
