"""The Gradio page: prompt and sampler settings in, a live canvas, a commit-step heat map and stats out.

Every model decodes in one continuous-batching engine (`arjet.engine`): concurrent visitors' images share
its `lanes` (as many visitors are served at once; more wait in a bounded queue), each visitor's canvas still
updating step by step. *Generate* streams the chosen sampler; *Compare with ar* decodes the same prompt and
seed with the chosen sampler and with `ar` at the same time, in the same engine, side by side. Every bad
input becomes a `gr.Error` shown in the page.

Nothing a visitor sends can hold a lane for long: requests are checked against the demo's limits
(`request.py`, and `arjet.limits.DEMO_LIMITS` on every pipeline), each image has a time budget (`time_limit`
seconds from its request) after which the engine stops it and frees its lane, a visitor who leaves frees
theirs, and `serve` refuses every file upload (the page takes none).
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import gradio as gr
import PIL.Image

from .. import samplers
from ..builtin import available_models, load_model
from ..engine import DecodeFailed, Engine, Overloaded, QueueFull
from ..limits import DEMO_ENGINE, DEMO_LIMITS, EngineConfig
from ..pipelines.base import ARPipelineOutput
from ..pipelines.prompts import unknown_words
from ..reports.plots import commit_step_maps
from ..reports.tables import markdown_table, number, ratio
from .live import TimeBudgetExceeded, stream_decode
from .request import DEMO_SAMPLING_RANGES, DecodeRequest, make_request

logger = logging.getLogger(__name__)
DISPLAY_SIZE = 320
MAX_UPLOAD_BYTES = 0  # the page takes no files; Gradio's upload route refuses any non-empty one
EXAMPLES = [
    "a red circle left of a blue square",
    "three green triangles",
    "a yellow star above a purple hexagon on a striped background",
]


class ModelShelf:
    """The pipelines the operator offered at launch, each loaded on first use with its engine, and kept;
    `config`: the demo's (each model's engine is `model_engine(config)`)."""

    def __init__(
        self,
        models: Mapping[str, str],
        device: str | None = None,
        config: EngineConfig = DEMO_ENGINE,
        clock: Callable[[], float] = time.monotonic,
        quantization: str | None = None,
    ):
        if not models:
            raise ValueError("the demo needs at least one model")
        self.sources = dict(models)
        self.device = device
        self.quantization = quantization  # every model's AR weights quantized so (`arjet.Quantization`)
        self.config = model_engine(config)
        self.clock = clock
        self._loaded: dict[str, Any] = {}
        self._engines: dict[str, Engine] = {}
        self._lock = threading.Lock()

    def get(self, label: str):
        if not isinstance(label, str) or label not in self.sources:
            raise ValueError(f"Unknown model {label!r}; choose one of {', '.join(self.sources)}.")
        with self._lock:
            if label not in self._loaded:
                pipe = load_model(self.sources[label], device=self.device, quantization=self.quantization)
                pipe.set_progress_bar_config(disable=True)
                pipe.limits = DEMO_LIMITS
                self._loaded[label] = pipe
            return self._loaded[label]

    def engine(self, label: str) -> Engine:
        """The model's engine (`model_engine`'s settings)."""
        pipe = self.get(label)
        with self._lock:
            if label not in self._engines:
                self._engines[label] = Engine(pipe, self.config, clock=self.clock).start()
            return self._engines[label]

    def warm_up(self) -> None:
        """Load every model and warm its engine up with the sampler the page offers first (`Engine.warm_up`:
        the throughput that admission estimates from), before the first visitor; a model that does not load,
        or cannot decode (`ValueError`), raises here. (The page offers no adaptive mode, so there is no cost
        model to measure.)"""
        for label in self.sources:
            try:
                self.engine(label).warm_up(_preferred(sampler_choices(self.get(label))))
            except DecodeFailed as error:  # the model's fault, told as one that does not load is
                raise ValueError(
                    f"model {self.sources[label]!r} cannot decode: {error.__cause__ or error}"
                ) from error

    def close(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            engine.close()


def model_engine(config: EngineConfig) -> EngineConfig:
    """The engine of each model in a demo of `config` (`config.lanes` visitors served at once): a comparison
    puts two images of each visitor in it, so twice the lanes, and a queue of four per visitor; no time
    limit of its own, as every request carries the page's (`Budget`)."""
    return replace(config, lanes=2 * config.lanes, max_queue=4 * config.lanes, time_limit=None)


def default_models() -> dict[str, str]:
    return {name: name for name in available_models()}


def build_demo(
    models: Mapping[str, str] | None = None,
    device: str | None = None,
    config: EngineConfig | None = None,
    *,
    max_prompt_chars: int = DEMO_LIMITS.max_prompt_chars,
    clock: Callable[[], float] = time.monotonic,
    quantization: str | None = None,
    **overrides: Any,
) -> gr.Blocks:
    """The demo over `models` ({label: built-in name or local checkpoint folder}; default: the built-ins),
    taking on what `config` says (default `DEMO_ENGINE`; `overrides`: any of its fields by name):
    `lanes` visitors served at once (their images share each model's engine, `model_engine`), `max_queue`
    visitors who may wait beyond them, `time_limit` seconds an image may take from its request before it
    is stopped (None: no limit), measured with `clock`. `quantization`: every model's AR weights quantized
    so as they load (`"int8"`, ...)."""
    config = replace(config or DEMO_ENGINE, **overrides)
    lanes = config.lanes
    shelf = ModelShelf(models or default_models(), device, config, clock, quantization)
    names = samplers.available()
    budget = Budget(config.time_limit)

    decode, compare = (_handler(shelf, with_ar, max_prompt_chars, budget) for with_ar in (False, True))

    with gr.Blocks(title="arjet: parallel decoding for AR image models") as demo:
        gr.Markdown(
            "# arjet\nWatch a decoder fill in the image, see which forward pass fixed each cell, and compare "
            "with plain autoregressive decoding (`ar`) on the same prompt and seed."
        )
        with gr.Row():
            with gr.Column(scale=1):
                prompt = gr.Textbox(label="Prompt", value=EXAMPLES[0], max_lines=3)
                model = gr.Dropdown(list(shelf.sources), value=next(iter(shelf.sources)), label="Model")
                sampler = gr.Dropdown(names, value=_preferred(names), label="Sampler")
                options = gr.Textbox(
                    label="Sampler options",
                    placeholder=_option_hint("sjd"),
                    info=_options_info("sjd"),
                )
                with gr.Row():
                    # no `precision`: Gradio would round 1.5 to 2; `make_request` refuses what is not whole
                    seed = gr.Number(value=0, label="Seed", minimum=0, step=1)
                    guidance = gr.Slider(
                        *DEMO_SAMPLING_RANGES["guidance_scale"], value=3.0, step=0.5, label="CFG scale"
                    )
                with gr.Row():
                    temperature = gr.Slider(
                        *DEMO_SAMPLING_RANGES["temperature"],
                        value=1.0,
                        step=0.05,
                        label="Temperature (0 = greedy)",
                    )
                    top_k = gr.Number(value=0, label="Top-k (0 = model default)", minimum=0, step=1)
                with gr.Row():
                    generate = gr.Button("Generate", variant="primary")
                    versus = gr.Button("Compare with ar")
                gr.Examples(EXAMPLES, inputs=prompt)
            with gr.Column(scale=2):
                with gr.Row():
                    image = gr.Image(
                        label="Sampler", type="pil", format="png", height=DISPLAY_SIZE, elem_id="live-image"
                    )
                    baseline = gr.Image(
                        label="ar (compare mode)", type="pil", format="png", height=DISPLAY_SIZE
                    )
                stats = gr.Markdown("Press **Generate**.", label="stats", elem_id="stats")
                heat = gr.Image(label="Commit-step map", type="pil", format="png", elem_id="heat-map")
        # the samplers the chosen model can run (its capabilities), when the page opens and on every change
        offer = _offer_samplers(shelf)
        demo.load(offer, [model, sampler], sampler, queue=False, api_visibility="private")
        model.change(offer, [model, sampler], sampler, queue=False, api_visibility="private")
        sampler.change(
            lambda name: gr.update(placeholder=_option_hint(name), info=_options_info(name)),
            sampler,
            options,
            queue=False,
            api_visibility="private",
        )
        inputs = [model, prompt, sampler, options, seed, guidance, temperature, top_k]
        outputs = [image, baseline, heat, stats]
        # the values as sent (no `preprocess`): `make_request` checks every one and names a bad one, where
        # Gradio's own conversion would answer a value of the wrong type with a generic error
        for button, handler, name in ((generate, decode, "generate"), (versus, compare, "compare")):
            button.click(
                handler,
                inputs,
                outputs,
                api_name=name,
                concurrency_limit=lanes,
                concurrency_id="decode",
                preprocess=False,
            )
    demo.queue(max_size=config.max_queue, default_concurrency_limit=lanes)
    demo.shelf = shelf  # the engines, for whoever closes the demo
    return demo


def sampler_choices(pipe) -> list[str]:
    """The registered samplers (at their default settings) that `pipe` can run: those whose requirements
    (`arjet.samplers.requirements`) its capabilities cover, e.g. no `sjd2` without noise conditioning."""
    offered = pipe.capabilities()
    return [
        name for name in samplers.available() if set(samplers.requirements(samplers.get(name))) <= offered
    ]


def _preferred(names: list[str]) -> str:
    return "sjd" if "sjd" in names else names[0]


def _offer_samplers(shelf: ModelShelf):
    """The event that narrows the sampler list to what the chosen model runs (keeping the choice if it can)."""

    def offer(label: str, current: str):
        try:
            names = sampler_choices(shelf.get(label))
        except (ValueError, FileNotFoundError) as error:
            raise _refused(str(error)) from None
        return gr.update(choices=names, value=current if current in names else _preferred(names))

    return offer


def serve(demo: gr.Blocks, host: str = "127.0.0.1", port: int | None = None, **launch: Any):
    """`demo.launch` with the demo's safe settings: loopback by default, no uploads, no tracebacks shown."""
    return demo.launch(
        server_name=host, server_port=port, max_file_size=MAX_UPLOAD_BYTES, show_error=False, **launch
    )


class Budget:
    """The time budget of each image, in seconds from its request (None: no limit)."""

    def __init__(self, seconds: float | None):
        if seconds is not None and not seconds > 0:
            raise ValueError(f"time_limit must be a number of seconds > 0 or None, got {seconds!r}")
        self.seconds = seconds


def _handler(shelf: ModelShelf, with_ar: bool, max_chars: int, budget: Budget):
    """The event function (Gradio reads its signature: eight inputs, then the progress tracker)."""

    def handle(model, prompt, sampler, options, seed, guidance, temperature, top_k, progress=gr.Progress()):
        inputs = (prompt, sampler, options, seed, guidance, temperature, top_k)
        yield from _run(shelf, model, inputs, with_ar, progress, max_chars, budget)

    return handle


def _run(
    shelf: ModelShelf, model: str, inputs: tuple, with_ar: bool, progress, max_chars: int, budget: Budget
):
    try:
        request = make_request(*inputs, max_prompt_chars=max_chars)
        pipe = shelf.get(model)
    except (ValueError, FileNotFoundError) as error:
        raise _refused(str(error)) from None
    notice = _unknown_words_notice(pipe, request.prompt)
    if not pipe.classifier_free_guidance and request.sampling.guidance_scale not in (None, 1):
        request = replace(request, sampling=replace(request.sampling, guidance_scale=None))
        notice = " ".join(
            filter(
                None,
                [
                    notice,
                    f"{model} has no classifier-free guidance in its AR stage: the CFG scale is not used.",
                ],
            )
        )
    if notice:
        gr.Warning(notice)
    runs = [request.sampler] + (["ar"] if with_ar and request.sampler != "ar" else [])  # ar once is enough
    shown: list[PIL.Image.Image | None] = [None, None]
    outputs: dict[str, ARPipelineOutput] = {}
    try:
        for frames in _frames(shelf.engine(model), request, runs, budget):
            decoded = sum(frame.decoded for frame in frames if frame is not None)
            total = sum(frame.total for frame in frames if frame is not None)
            progress(decoded / max(total, 1), desc=f"{' and '.join(runs)}: {decoded}/{total} codes")
            for index, frame in enumerate(frames):
                if frame is not None:
                    shown[index] = _enlarge(frame.canvas)
                    if frame.output is not None:
                        outputs[runs[index]] = frame.output
            progress_line = ", ".join(
                f"**{spec}**: {frame.decoded} / {frame.total}"
                for spec, frame in zip(runs, frames, strict=True)
                if frame is not None
            )
            yield *shown, None, f"{progress_line} codes decoded"
    except TimeBudgetExceeded:
        raise _refused(
            f"This request ran past the demo's time budget of {budget.seconds:g} s and was stopped so that the "
            "next one can run; try a smaller window, another sampler or fewer comparisons."
        ) from None
    except (
        ValueError
    ) as error:  # e.g. a sampler that needs what this model lacks (sjd2 without its fine-tune)
        raise _refused(str(error)) from None
    except Overloaded as busy:
        raise _refused(
            f"The demo is busy: your image would take about {busy.expected_wait:.0f} s, past its time budget "
            f"of {budget.seconds:g} s; please try again in {busy.retry_after:.0f} s."
        ) from None
    except QueueFull:
        raise _refused("The demo is busy; please try again in a moment.") from None
    except Exception as error:  # the page gets a readable line, the operator the traceback (once)
        logger.exception("decoding %r with %s failed", request.prompt, runs)
        raise gr.Error(
            f"generation failed ({type(error).__name__}); please try again", print_exception=False
        ) from None
    yield (
        *shown,
        _heat_map(outputs, request),
        _stats_table(outputs, runs) + (f"\n\n{notice}" if notice else ""),
    )


def _refused(message: str) -> gr.Error:
    """The page's message for a request it will not run; the server log gets the same as one line."""
    logger.warning("request refused: %s", " ".join(message.split()))
    return gr.Error(message, print_exception=False)


def _option_hint(sampler: str) -> str:
    """The chosen sampler's options at their defaults (`window=16, init=random, ...`), from the registry."""
    if sampler not in samplers.available():
        return ""
    return ", ".join(option.example() for option in samplers.options(sampler))


def _options_info(sampler: str) -> str:
    """The chosen sampler's options, from the registry's schema."""
    if sampler not in samplers.available():
        return "key=value, comma separated"
    names = [option.name for option in samplers.options(sampler)]
    return "key=value, comma separated; " + (f"options: {', '.join(names)}" if names else "no options")


def _unknown_words_notice(pipe, prompt: str) -> str:
    words = unknown_words(pipe.text_tokenizer, prompt)
    if not words:
        return ""
    return f"The model does not know {', '.join(map(repr, words))}; it reads each as its unknown token."


def _frames(engine: Engine, request: DecodeRequest, runs: list[str], budget: Budget):
    return stream_decode(
        engine,
        request.prompt,
        runs,
        seed=request.seed,
        sampling=request.sampling,
        time_limit=budget.seconds,
    )


def _enlarge(image: PIL.Image.Image) -> PIL.Image.Image:
    scale = max(1, DISPLAY_SIZE // max(image.size))
    return image.resize((image.width * scale, image.height * scale), PIL.Image.NEAREST)


def _heat_map(outputs: Mapping[str, ARPipelineOutput], request: DecodeRequest) -> PIL.Image.Image:
    maps = {
        spec: [(f"seed {request.seed}", out.stats[0].commit_step.cpu().numpy())]
        for spec, out in outputs.items()
    }
    figure = commit_step_maps(maps)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90)
    return PIL.Image.open(io.BytesIO(buffer.getvalue()))


def _stats_table(outputs: Mapping[str, ARPipelineOutput], runs: list[str]) -> str:
    header = ("sampler", "forward passes", "codes", "step compression", "seconds")
    rows = [
        (
            f"`{spec}`",
            str(stat.forward_passes),
            str(stat.tokens),
            ratio(stat.compression),
            number(stat.seconds),
        )
        for spec in runs
        for stat in outputs[spec].stats[:1]
    ]
    lines = [markdown_table(header, rows, numeric=(False, True, True, True, True))]
    if "ar" in outputs and len(runs) > 1:
        ours, ar = outputs[runs[0]].stats[0], outputs["ar"].stats[0]
        lines.append(
            f"\n`{runs[0]}` used {ar.forward_passes / ours.forward_passes:.2f}x fewer forward passes than `ar` "
            f"and ran {ar.seconds / max(ours.seconds, 1e-9):.2f}x faster (seconds include this page's previews)."
        )
    return "\n".join(lines)
