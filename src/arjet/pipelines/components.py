"""Loading a weight component (a transformers model, a VQ, noise conditioning, ...) with its loader's report
read: a checkpoint whose weights do not match the model (renamed, another model's, cut short) is an error
naming the component and some of the keys, never a model left partly at its random initialisation.

transformers and diffusers both load such a folder, initialise what is missing at random and only log a
report; arjet asks the loader for that report (`output_loading_info=True`) and refuses instead, unless the
caller passes `strict=False`.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import pickle
import re
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import checks
from ..machine import available_bytes, check_fits_in_memory, module_bytes
from .loading import is_packaged

if TYPE_CHECKING:
    from ..quantize import Quantization

SHOWN_KEYS = 3  # keys named per kind of mismatch (the count says how many there are)
EPSILON_SUFFIX = "norm_eps"  # a config's normalisation epsilons: rms_norm_eps, layer_norm_eps, ...
MAX_EPSILON = 1e-2  # released models use 1e-6 or 1e-5; one near a hidden state's mean square flattens it
# a config's layer counts (a block repeated that many times; `num_res_blocks`: a VQ model's per resolution);
# above LAYER_PROBE of one, the model's size is extrapolated before it is built
LAYER_FIELDS = (
    "num_hidden_layers",
    "num_layers",
    "num_decoder_layers",
    "num_encoder_layers",
    "depth",
    "num_res_blocks",
)
LAYER_PROBE = 256
# a config's lists of per-level settings (a VQ encoder or VAE halves its input once a level): every level is
# a block of modules built before any weight is read, and more than MAX_LEVELS would halve a 65,536-px image
# to one pixel
LEVEL_FIELDS = (
    "channel_multiplier",
    "ch_mult",
    "attn_resolutions",
    "block_out_channels",
    "down_block_types",
    "up_block_types",
)
MAX_LEVELS = 16
# the loggers that print the loaders' own reports, silenced while arjet reports the mismatch itself
REPORT_LOGGERS = ("transformers.modeling_utils", "diffusers.models.modeling_utils")


def load_component(
    model_class: Any,
    folder: str | Path,
    component: str,
    *,
    strict: bool = True,
    unread: tuple[str, ...] = (),
    quantization: Quantization | None = None,
    quantized: tuple[str, ...] = (),
    **kwargs: Any,
) -> Any:
    """`model_class.from_pretrained(folder, **kwargs)` for the pipeline component `component`; ValueError
    when the folder's weights and the model's differ, unless `strict=False` (then what matches loads and
    the rest keeps its random initialisation, with the loader's own report printed). Weights under the
    prefixes `unread` (parts of the model the pipeline never runs) may be missing.

    Before any weight is read, the model the folder's config describes is built on the meta device and
    refused when it could not fit in memory; a weights file holding pickled objects other than tensors
    (which torch refuses to unpickle with `weights_only=True`) is a ValueError naming the folder, and so are
    weights that are not finite (`check_finite`), with `strict=False` too.

    `quantization`: quantize the linear layers under the module paths `quantized` as their tensors are read
    (`load_quantized`), so that the float weights of one layer at a time are in memory, never the whole
    model's."""
    config = read_config(model_class, folder, component)
    if not is_packaged(folder):  # the package's own models are known to be small
        what = f"the config of component {component!r} ({model_class.__name__}) in {folder}"
        dtype = _load_dtype(folder, kwargs.get("dtype"))
        check_layers_fit(what, lambda sized: _build(model_class, sized), config, dtype)
        saved = None if quantization is None else lambda m: quantization.saved_bytes(m, quantized, dtype)
        check_fits_in_memory(what, lambda: _build(model_class, config), dtype, saved=saved)
    with _readable_weights(component, folder):
        if quantization is not None:
            dtype = _load_dtype(folder, kwargs.get("dtype"))
            model, report = load_quantized(model_class, config, folder, dtype, quantization, quantized)
        elif not strict:
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


def load_quantized(
    model_class: Any,
    config: Any,
    folder: str | Path,
    dtype: Any,
    quantization: Quantization,
    quantized: tuple[str, ...],
) -> tuple[Any, dict[str, list]]:
    """The model `config` describes, with the weights of the safetensors files in `folder` read one module at
    a time (floating ones in `dtype`): each linear layer under the module paths `quantized` is quantized as
    soon as its weight is read and its float weight dropped, so the float weights of one layer at a time are
    in memory, besides what stays float (embeddings, norms, the VQ). Keys are renamed as transformers renames
    them at load (`_by_model_key`: a checkpoint in the hub's layout). On `quantization.device`. Returns the
    model and a loader's report (`check_load_report`); a weight the folder lacks is left zero."""
    import torch
    from safetensors import safe_open

    from ..machine import parameters_on_meta, release_freed_memory
    from ..quantize import linear_names

    with parameters_on_meta():
        model = _build(model_class, config)
    chosen = linear_names(model, quantized)
    device = torch.device(quantization.device)
    names_of: dict[int, list[str]] = {}  # a parameter shared by several modules (tied weights) has several
    for name, param in model.named_parameters(remove_duplicate=False):
        names_of.setdefault(id(param), []).append(name)
    report: dict[str, list] = {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": []}
    with contextlib.ExitStack() as files:
        stored = {
            key: opened
            for path in _safetensors_files(folder)
            for opened in [files.enter_context(safe_open(str(path), "pt", device="cpu"))]
            for key in opened.keys()  # noqa: SIM118 (a safetensors file is no mapping)
        }
        where = _by_model_key(model, stored)
        shared: dict[int, torch.nn.Parameter] = {}
        for path, module in model.named_modules():
            for name, param in module._parameters.items():
                if param is not None:
                    made = shared.get(id(param))
                    if made is None:
                        made = torch.nn.Parameter(
                            _read(where, names_of[id(param)], param, dtype, device, report)
                        )
                        if len(names_of[id(param)]) > 1:
                            shared[id(param)] = made
                    module._parameters[name] = made
            for name, buffer in module._buffers.items():
                key = f"{path}.{name}" if path else name
                if buffer is not None:
                    found = _tensor(where, key) if key in where else buffer
                    module._buffers[name] = found.to(device=device, dtype=_cast(found, dtype))
            if path in chosen:
                quantization.apply(module, ("",))
                release_freed_memory()  # the float weight just dropped
        known = {name for names in names_of.values() for name in names} | dict(model.named_buffers()).keys()
        report["unexpected_keys"] = sorted(where[key][0] for key in set(where) - known)
    if (Path(folder) / "generation_config.json").is_file():
        from transformers import GenerationConfig

        model.generation_config = GenerationConfig.from_pretrained(folder)
    return model.eval(), report


def _by_model_key(model: Any, stored: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """The checkpoint's tensors (`stored`: key -> the open file holding it) by the model's name for each:
    (the checkpoint's key, its file). A transformers model is read as its `from_pretrained` reads it, with
    the renamings transformers applies at load (a checkpoint in the hub's layout, Emu3's
    `text_model.model.*` read as `model.text_model.*`, and the base model's prefix added or dropped); a key
    that needs more than a renaming (a converter that splits or joins tensors) keeps its own name, so strict
    loading reports it."""
    if not _is_transformers(type(model)):
        return {key: (key, opened) for key, opened in stored.items()}
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key

    transforms = get_model_conversion_mapping(model)
    renamings = [entry for entry in transforms if isinstance(entry, WeightRenaming)]
    converters = [entry for entry in transforms if isinstance(entry, WeightConverter)]
    known = model.state_dict()
    prefix = model.base_model_prefix
    renamed = {}
    for key, opened in stored.items():
        name, converted = rename_source_key(key, renamings, converters, prefix, known)
        # a converted key, or one that names a weight of the model only before renaming: as transformers'
        # loader, its own name (with the base model's prefix added or dropped)
        if converted is not None or (name not in known and key in known):
            name, _ = rename_source_key(key, [], [], prefix, known)
        renamed[name] = (key, opened)
    return renamed


def _tensor(where: dict[str, tuple[str, Any]], name: str) -> Any:
    """The tensor `where` (`_by_model_key`) holds for the model's weight `name`."""
    key, opened = where[name]
    return opened.get_tensor(key)


def _safetensors_files(folder: str | Path) -> list[Path]:
    """The safetensors files of a checkpoint folder (one file, or the shards its index names)."""
    folder = Path(folder)
    index = next(iter(sorted(folder.glob("*.safetensors.index.json"))), None)  # transformers' or diffusers'
    if index is not None:
        shards = checks.read_json(index).get("weight_map", {}).values()
        return [folder / name for name in sorted(set(shards))]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ValueError(
            f"{folder} holds no .safetensors weights; quantized loading reads safetensors only (save the model "
            "with save_pretrained, which writes them)"
        )
    return files


def _read(where: dict, names: list[str], param: Any, dtype: Any, device: Any, report: dict) -> Any:
    """The checkpoint's tensor for a parameter known by `names` (the first the files hold), on `device`,
    floating in `dtype`; zeros of its shape, reported missing or mismatched, where there is none that fits."""
    import torch

    key = next((name for name in names if name in where), None)
    tensor = None if key is None else _tensor(where, key)
    if tensor is None or tensor.shape != param.shape:
        if tensor is None:
            report["missing_keys"].extend(names)
        else:
            report["mismatched_keys"].append((where[key][0], tuple(tensor.shape), tuple(param.shape)))
        return torch.zeros(param.shape, dtype=_cast(param, dtype), device=device)
    return tensor.to(device=device, dtype=_cast(tensor, dtype))


def _cast(tensor: Any, dtype: Any) -> Any:
    return dtype if tensor.is_floating_point() else tensor.dtype


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


def read_config(model_class: Any, folder: str | Path, component: str) -> Any:
    """The config of `folder` as `model_class` reads it (a transformers config, or diffusers' dict), checked
    at this boundary: a field of the wrong type or value (transformers' strict configs raise their own
    errors for `hidden_size: "256"`) and a norm's epsilon that is not a finite number > 0 (`check_epsilons`)
    are ValueErrors naming the file and the field."""
    from huggingface_hub.errors import StrictDataclassError

    path = Path(folder) / "config.json"
    if path.is_file():  # malformed or nested too deep: a ValueError naming it
        raw = checks.read_json(path)
        check_model_types(path, raw)
        check_levels(path, raw)
    try:
        if _is_transformers(model_class):
            config = model_class.config_class.from_pretrained(folder)
            fields = config.to_dict()
        else:
            config = fields = model_class.load_config(folder)
    except (StrictDataclassError, ValueError, TypeError, KeyError, AttributeError) as error:
        detail = " ".join(str(error).split()) or type(error).__name__
        raise ValueError(
            f"{path}, the config of component {component!r} ({model_class.__name__}), holds a field of the "
            f"wrong type or value: {detail}"
        ) from None
    check_epsilons(path, fields)
    return config


def check_levels(path: Path, fields: Any) -> None:
    """Refuse a list of per-level settings (`LEVEL_FIELDS`, in a config file's `fields` or a sub-config) of
    more than `MAX_LEVELS` items, before the model is built: 10,000 levels built 280,000 modules for 95 s
    before the weights' mismatch was found."""
    for name, value in _fields(fields if isinstance(fields, dict) else {}):
        if name.rsplit(".", 1)[-1] in LEVEL_FIELDS and isinstance(value, list) and len(value) > MAX_LEVELS:
            raise ValueError(
                f"{path}: {name} lists {len(value):,} levels, more than {MAX_LEVELS} (each halves the image); "
                "check its sizes"
            )


def check_model_types(path: Path, fields: Any) -> None:
    """Refuse a `model_type` (in a config file's `fields` or a sub-config) that is not a string, before
    transformers reads it: it looks the name up in its tables, and a list (`["janus"]`) raised a TypeError
    from inside its weight loader."""
    for name, value in _fields(fields if isinstance(fields, dict) else {}):
        if name.rsplit(".", 1)[-1] == "model_type" and not isinstance(value, str):
            raise ValueError(f"{path}: {name} must be a string such as 'janus', got {checks.shown(value)}")


def check_epsilons(path: Path, fields: dict[str, Any]) -> None:
    """Refuse a norm's epsilon (`rms_norm_eps`, `layer_norm_eps`, ... in `fields` or a sub-config) that is not
    a finite number in (0, `MAX_EPSILON`]: NaN turns every normalised value into NaN (every code 0), 0 divides
    by zero, and a large one (1e10) divides every hidden state down to nothing (noise images, exit 0)."""
    for name, value in _fields(fields):
        if name.rsplit(".", 1)[-1].endswith(EPSILON_SUFFIX):
            checks.number(
                f"{path}: {name}",
                value,
                0.0,
                MAX_EPSILON,
                exclusive_minimum=True,
                note="a norm's epsilon, e.g. 1e-6",
            )


def check_layers_fit(what: str, build: Any, config: Any, dtype: Any) -> None:
    """Refuse, before the model is built, a config whose layer counts make it too large for memory: the
    meta-device build `check_fits_in_memory` runs takes time in proportion to the layers (minutes for a
    million), so where a count exceeds `LAYER_PROBE` the size is extrapolated from builds of one and two
    layers per count (`build(config)`). A config those small builds fail on is left to the full check."""
    import torch

    counts = [
        (name, value)
        for name, value in _fields(config.to_dict() if hasattr(config, "to_dict") else config)
        if name.rsplit(".", 1)[-1] in LAYER_FIELDS and checks.is_integer(value) and value > 0
    ]
    if not any(value > LAYER_PROBE for _, value in counts):
        return
    try:
        with torch.device("meta"):
            single = _sizes(build(_with_counts(config, {name: 1 for name, _ in counts})), dtype)
            per_layer = [
                _sizes(build(_with_counts(config, {**{n: 1 for n, _ in counts}, name: 2})), dtype)
                for name, _ in counts
            ]
    except (ValueError, TypeError, RuntimeError, KeyError, AttributeError, ZeroDivisionError):
        return
    count, needed = single
    for (_, value), (params, size) in zip(counts, per_layer, strict=True):
        count += (value - 1) * (params - single[0])
        needed += (value - 1) * (size - single[1])
    free = available_bytes("cpu")
    if free is not None and needed > free:
        layers = ", ".join(f"{name}={value:,}" for name, value in counts if value > LAYER_PROBE)
        raise ValueError(
            f"{what} describes a model of about {count:,} parameters ({layers}) that would take "
            f"{needed / 1e9:.3g} GB, more than the {free / 1e9:.3g} GB of memory free on cpu; check its sizes"
        )


def _build(model_class: Any, config: Any) -> Any:
    """The model `config` describes (`read_config`'s), built in the current device context (the meta
    device: sizes only). transformers and diffusers classes take their configs differently."""
    if _is_transformers(model_class):
        return model_class._from_config(copy.deepcopy(config))
    return model_class.from_config(copy.deepcopy(config))


def _is_transformers(model_class: Any) -> bool:
    return getattr(model_class, "config_class", None) is not None and hasattr(model_class, "_from_config")


def _fields(config: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every field of a config's dict, sub-configs' as `text_config.hidden_size`."""
    for key, value in config.items():
        if isinstance(value, dict):
            yield from _fields(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _with_counts(config: Any, counts: dict[str, int]) -> Any:
    """A copy of `config` (a transformers config or a dict) with the fields `counts` names (dotted, into
    sub-configs) set."""
    config = copy.deepcopy(config)
    for name, value in counts.items():
        *parents, field = name.split(".")
        owner = config
        for parent in parents:
            owner = owner[parent] if isinstance(owner, dict) else getattr(owner, parent)
        if isinstance(owner, dict):
            owner[field] = value
        else:
            setattr(owner, field, value)
    return config


def _sizes(module: Any, dtype: Any) -> tuple[int, int]:
    """(parameters, bytes) of a module built on the meta device."""
    return sum(t.numel() for t in module.parameters()), module_bytes(module, dtype)


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
