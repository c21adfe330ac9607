"""Build a module without allocating its weights, then give it random weights directly on a device.

`parameters_on_meta()` makes every parameter created inside it a meta tensor (no memory, no init work)
while buffers (rotary frequencies, position ids, batch-norm statistics: small, and computed from the
config) are built for real. `materialize_random_(module, device, dtype, seed)` then allocates the
parameters on `device` in `dtype`, puts the buffers there, and fills every floating parameter with
`normal(0, std)` from a seeded generator on that device. A 7B model never exists on the CPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

RANDOM_STD = 0.02  # the usual initializer range of these models' configs


@contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Inside this block, parameters registered on any module are moved to the meta device."""
    register = nn.Module.register_parameter

    def register_on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None and param.device.type != "meta":
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = register_on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


def materialize_random_(
    module: nn.Module,
    device: torch.device | str,
    dtype: torch.dtype,
    seed: int = 0,
    std: float = RANDOM_STD,
) -> nn.Module:
    """Allocate `module`'s parameters (uninitialised, like `to_empty`) on `device`, floating ones in `dtype`,
    and fill them with seeded `normal(0, std)`; buffers keep their values, floating ones cast to `dtype` (as
    `module.to(dtype)` would). Parameters shared between modules stay shared. In place."""
    device = torch.device(device)
    allocated: dict[int, nn.Parameter] = {}
    for owner in module.modules():
        for name, param in owner._parameters.items():
            if param is None:
                continue
            if id(param) not in allocated:
                empty = torch.empty(param.shape, dtype=_cast(param, dtype), device=device)
                allocated[id(param)] = nn.Parameter(empty, requires_grad=param.requires_grad)
            owner._parameters[name] = allocated[id(param)]
        for name, buffer in owner._buffers.items():
            if buffer is not None:
                owner._buffers[name] = buffer.to(device=device, dtype=_cast(buffer, dtype))
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for param in allocated.values():
            if param.is_floating_point():
                param.normal_(0.0, std, generator=generator)
    return module


def _cast(tensor: torch.Tensor, dtype: torch.dtype) -> torch.dtype:
    return dtype if tensor.is_floating_point() else tensor.dtype


def required_bytes(module: nn.Module, dtype: torch.dtype) -> int:
    """Bytes `materialize_random_(module, device, dtype)` allocates for the parameters."""
    size = torch.empty((), dtype=dtype).element_size()
    unique = {id(p): p for p in module.parameters()}.values()
    return sum(p.numel() * (size if p.is_floating_point() else p.element_size()) for p in unique)
