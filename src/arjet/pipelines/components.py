"""Loading a weight component (a transformers model, a VQ, noise conditioning, ...) with its loader's report
read: a checkpoint whose weights do not match the model (renamed, another model's, cut short) is an error
naming the component and some of the keys, never a model left partly at its random initialisation.

transformers and diffusers both load such a folder, initialise what is missing at random and only log a
report; arjet asks the loader for that report (`output_loading_info=True`) and refuses instead, unless the
caller passes `strict=False`.
"""

from __future__ import annotations

import logging
import pickle
import re
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .. import checks
from ..machine import check_fits_in_memory
from .loading import is_packaged

SHOWN_KEYS = 3  # keys named per kind of mismatch (the count says how many there are)
# the loggers that print the loaders' own reports, silenced while arjet reports the mismatch itself
REPORT_LOGGERS = ("transformers.modeling_utils", "diffusers.models.modeling_utils")


def load_component(
    model_class: Any,
    folder: str | Path,
    component: str,
    *,
    strict: bool = True,
    unread: tuple[str, ...] = (),
    **kwargs: Any,
) -> Any:
    """`model_class.from_pretrained(folder, **kwargs)` for the pipeline component `component`; ValueError
    when the folder's weights and the model's differ, unless `strict=False` (then what matches loads and
    the rest keeps its random initialisation, with the loader's own report printed). Weights under the
    prefixes `unread` (parts of the model the pipeline never runs) may be missing.

    Before any weight is read, the model the folder's config describes is built on the meta device and
    refused when it could not fit in memory; a weights file holding pickled objects other than tensors
    (which torch refuses to unpickle with `weights_only=True`) is a ValueError naming the folder, and so are
    weights that are not finite (`check_finite`), with `strict=False` too."""
    if not is_packaged(folder):  # the package's own models are known to be small
        check_fits_in_memory(
            f"the config of component {component!r} ({model_class.__name__}) in {folder}",
            lambda: _build_from_config(model_class, folder),
            _load_dtype(folder, kwargs.get("dtype")),
        )
    with _readable_weights(component, folder):
        if not strict:
            model = model_class.from_pretrained(folder, **kwargs)
        else:
            with _quiet(REPORT_LOGGERS):
                model, report = model_class.from_pretrained(
                    folder, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs
                )
    if strict:
        check_load_report(component, model_class, folder, report, unread)
    check_finite(component, model_class, folder, model)
    return model


def check_finite(component: str, model_class: Any, folder: str | Path, model: Any) -> None:
    """Refuse a model with a NaN or infinite weight (`weights.check_finite`), naming `component`, its class
    and `folder`."""
    from ..weights import check_finite as check_weights

    check_weights(f"the weights of component {component!r} ({model_class.__name__}) in {folder}", model)


@contextmanager
def quiet_loading() -> Iterator[None]:
    """No progress bars from transformers' and diffusers' loaders meanwhile: they drew one bar per component
    and per weights file, nested, for loads that take a fraction of a second. Each library's own setting is
    restored afterwards."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    shown = [lib for lib in (transformers_logging, diffusers_logging) if lib.is_progress_bar_enabled()]
    for library in shown:
        library.disable_progress_bar()
    try:
        yield
    finally:
        for library in shown:
            library.enable_progress_bar()


def _build_from_config(model_class: Any, folder: str | Path) -> Any:
    """The model `folder`'s config describes, built in the current device context (the meta device: sizes
    only). transformers and diffusers classes read their configs differently."""
    config_class = getattr(model_class, "config_class", None)
    if config_class is not None and hasattr(model_class, "_from_config"):
        return model_class._from_config(config_class.from_pretrained(folder))
    return model_class.from_config(model_class.load_config(folder))


def _load_dtype(folder: str | Path, dtype: Any) -> Any:
    """The dtype the floating weights load in: the one asked for, else the checkpoint's (its config's
    `dtype` / `torch_dtype`), else float32."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        saved = checks.read_json(Path(folder) / "config.json")  # malformed: a ValueError naming it
    except OSError:
        saved = None
    if isinstance(saved, dict):
        named = getattr(torch, str(saved.get("dtype") or saved.get("torch_dtype")), None)
        if isinstance(named, torch.dtype):
            return named
    return torch.float32


@contextmanager
def _readable_weights(component: str, folder: str | Path) -> Iterator[None]:
    """A weights file torch will not unpickle (objects other than tensors) as one ValueError naming it, not
    torch's message (which suggests `weights_only=False`, i.e. running the file's code)."""
    try:
        yield
    except pickle.UnpicklingError as error:
        found = re.search(r"GLOBAL (\S+)", str(error))
        what = f" ({found.group(1)})" if found else ""
        raise ValueError(
            f"the weights of component {component!r} in {folder} hold pickled Python objects other than "
            f"tensors{what}, which arjet does not unpickle (that could run code from the file); save the "
            "weights as .safetensors, or as a torch file of tensors only"
        ) from None


def check_load_report(
    component: str,
    model_class: Any,
    folder: str | Path,
    report: dict[str, Any],
    unread: tuple[str, ...] = (),
) -> None:
    """Raise a ValueError naming `component` and a few keys when the loader's `report` (transformers' or
    diffusers' `output_loading_info`) lists weights missing from the checkpoint (other than under the
    prefixes `unread`) or not in the model."""
    report = {
        **report,
        "missing_keys": [k for k in report.get("missing_keys") or () if not k.startswith(unread)],
    }
    kinds = (
        ("missing_keys", "of the model's weights are not in the checkpoint"),
        ("unexpected_keys", "of the checkpoint's weights are not in the model"),
        ("mismatched_keys", "weights have another shape in the checkpoint"),
    )
    found = []
    for field, what in kinds:
        keys = sorted(_key_name(key) for key in report.get(field) or ())
        if keys:
            shown = ", ".join(keys[:SHOWN_KEYS]) + (", ..." if len(keys) > SHOWN_KEYS else "")
            found.append(f"{len(keys)} {what} ({shown})")
    if found:
        raise ValueError(
            f"the weights of component {component!r} ({model_class.__name__}) in {folder} do not match the model: "
            f"{'; '.join(found)}. Check that the folder holds a checkpoint of this model; to load what matches "
            "and leave the rest at random, pass strict=False to from_pretrained"
        )


def weight_classes(annotation: Any) -> list[type]:
    """The classes in a pipeline argument's annotation (`NoiseConditioning | None`) that load weights: torch
    modules with a `from_pretrained` (a tokenizer has one too, but holds no weights)."""
    import torch

    options = typing.get_args(annotation) or (annotation,)
    return [
        option
        for option in options
        if isinstance(option, type)
        and issubclass(option, torch.nn.Module)
        and callable(getattr(option, "from_pretrained", None))
    ]


def _key_name(key: Any) -> str:
    """transformers reports a mismatched key as (name, shape in the checkpoint, shape in the model)."""
    return str(key[0]) if isinstance(key, tuple) else str(key)


@contextmanager
def _quiet(names: tuple[str, ...]) -> Iterator[None]:
    """Drop what the loggers `names` log meanwhile (a filter, not a level: transformers reads its logger's
    level to decide what else to check and print)."""
    loggers = [logging.getLogger(name) for name in names]
    for logger in loggers:
        logger.addFilter(_drop)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(_drop)


def _drop(record: logging.LogRecord) -> bool:
    return False
