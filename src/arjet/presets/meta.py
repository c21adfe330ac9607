"""Build a module without allocating its weights, then give it random weights directly on a device.

`parameters_on_meta()` makes every parameter created inside it a meta tensor (no memory, no init work)
while buffers (rotary frequencies, position ids, batch-norm statistics: small, and computed from the
config) are built for real. `materialize_random_(module, device, dtype, seed)` then allocates the
parameters on `device` in `dtype`, puts the buffers there, and fills every floating parameter with
`normal(0, std)` from a seeded generator on that device. A 7B model never exists on the CPU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch
from torch import nn

from ..machine import parameters_on_meta

__all__ = ["materialize_random_", "parameters_on_meta", "required_bytes"]

RANDOM_STD = 0.02  # the usual initializer range of these models' configs


def materialize_random_(
    module: nn.Module,
    device: torch.device | str,
    dtype: torch.dtype,
    seed: int = 0,
    std: float = RANDOM_STD,
    *,
    each: Callable[[str, nn.Module], None] | None = None,
) -> nn.Module:
    """Allocate `module`'s parameters (uninitialised, like `to_empty`) on `device`, floating ones in `dtype`,
    and fill them with seeded `normal(0, std)`; buffers keep their values, floating ones cast to `dtype` (as
    `module.to(dtype)` would). Parameters shared between modules stay shared. In place, one submodule at a
    time: `each(path, submodule)` runs on every submodule once its own parameters are filled (to quantize a
    layer before the next is allocated), and a parameter no other module shares is not kept alive here."""
    device = torch.device(device)
    uses = Counter(id(p) for owner in module.modules() for p in owner._parameters.values() if p is not None)
    shared: dict[int, nn.Parameter] = {}
    generator = torch.Generator(device=device).manual_seed(seed)
    for path, owner in module.named_modules():
        fresh = []
        for name, param in owner._parameters.items():
            if param is None:
                continue
            made = shared.get(id(param))
            if made is None:
                empty = torch.empty(param.shape, dtype=_cast(param, dtype), device=device)
                made = nn.Parameter(empty, requires_grad=param.requires_grad)
                fresh.append(made)
                if uses[id(param)] > 1:
                    shared[id(param)] = made
            owner._parameters[name] = made
        for name, buffer in owner._buffers.items():
            if buffer is not None:
                owner._buffers[name] = buffer.to(device=device, dtype=_cast(buffer, dtype))
        with torch.no_grad():
            for param in fresh:
                if param.is_floating_point():
                    param.normal_(0.0, std, generator=generator)
        if each is not None:
            each(path, owner)
    return module


def _cast(tensor: torch.Tensor, dtype: torch.dtype) -> torch.dtype:
    return dtype if tensor.is_floating_point() else tensor.dtype


def required_bytes(module: nn.Module, dtype: torch.dtype) -> int:
    """Bytes `materialize_random_(module, device, dtype)` allocates for the parameters."""
    size = torch.empty((), dtype=dtype).element_size()
    unique = {id(p): p for p in module.parameters()}.values()
    return sum(p.numel() * (size if p.is_floating_point() else p.element_size()) for p in unique)
