"""Tables an acceptance rule derives from a model's VQ codebook (LANTERN's nearest codes, GSD's close pairs),
built once per codebook and kept on the decode's device, so a decode step reads nothing back after the first.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable

import torch

CACHE_SIZE = 4  # tables kept (a few models' codebooks, a few settings each)

_PLACED: OrderedDict[tuple, tuple[weakref.ref, torch.Tensor]] = OrderedDict()


def placed(
    codebook: torch.Tensor,
    setting: Hashable,
    build: Callable[[torch.Tensor], torch.Tensor],
    device: torch.device,
) -> torch.Tensor:
    """`build(codebook)` on `device`, remembered per codebook object (and its in-place version) and `setting`
    (what else `build` depends on)."""
    key = (id(codebook), codebook._version, setting, str(device))
    hit = _PLACED.get(key)
    if hit is not None and hit[0]() is codebook:
        _PLACED.move_to_end(key)
        return hit[1]
    table = build(codebook).to(device)
    _PLACED[key] = (weakref.ref(codebook), table)
    while len(_PLACED) > CACHE_SIZE:
        _PLACED.popitem(last=False)
    return table
