"""Quantized weights through torchao: `Quantization("int8")` names a scheme, checks it can run here, and
quantizes a model's chosen linear layers in place (or hands transformers the config that quantizes them as
the checkpoint's tensors are read).

- `int8`: weight-only, one scale per output row (torchao's `Int8WeightOnlyConfig`); CPU and CUDA.
- `int4`: weight-only, a scale and zero point per group of `INT4_GROUP` inputs (`Int4WeightOnlyConfig`,
  tinygemm's tile-packed layout over bfloat16); CUDA only: torchao 0.18's int4 layouts have no CPU kernel
  (the plain and preshuffled ones need the `mslk` kernels, `plain_int32` refuses the CPU).
- `fp8`: weight-only float8 e4m3 (`Float8WeightOnlyConfig`); CUDA GPUs of compute capability >= 8.9.

A quantized linear's weight is one of torchao's tensor subclasses: `F.linear(x, weight, bias)` runs its
quantized kernel, and `is_quantized` tells such a weight from a plain one. Only what a pipeline names is
quantized (its AR decoder's linear layers and code head, a drafter's when asked): embeddings, norms and the
VQ decoder keep their dtype. Every refusal is one line, raised before any weight is read. Light on purpose:
the command line reads `SCHEMES` before torch is imported.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

SCHEMES = ("int8", "int4", "fp8")
INSTALL = "pip install 'arjet[quant]'"


class TorchaoMissing(ImportError, ValueError):
    """torchao is not installed (a ValueError too: the command line tells it in one line)."""


INT4_GROUP = 128  # inputs per int4 scale: Lumina-mGPT 2.0's and gpt-fast's choice
FP8_CAPABILITY = (8, 9)  # Ada and Hopper: the first with float8 matrix units


@dataclass(frozen=True)
class Quantization:
    """A quantization scheme (`"int8"`, `"int4"`, `"fp8"`); `drafter`: quantize a pipeline's drafter too."""

    scheme: str
    drafter: bool = False

    def __post_init__(self):
        if self.scheme is None:
            raise ValueError(
                f"Quantization needs a scheme, one of {', '.join(SCHEMES)}; for no quantization pass "
                "quantization=None itself, not Quantization(None)"
            )
        if self.scheme not in SCHEMES:
            raise ValueError(
                f"unknown quantization {self.scheme!r}: choose one of {', '.join(SCHEMES)} (or None: no quantization)"
            )
        if not isinstance(self.drafter, bool):
            raise ValueError(f"Quantization.drafter must be True or False, got {self.drafter!r}")

    @property
    def bytes_per_weight(self) -> float:
        """Bytes a quantized weight takes per value (its scales aside)."""
        return 0.5 if self.scheme == "int4" else 1.0

    @property
    def device(self) -> str:
        """Where the weights are quantized: int8 on the CPU (its weights move to a GPU after), the others
        on the GPU their kernels run on."""
        return "cpu" if self.scheme == "int8" else "cuda"

    @classmethod
    def parse(cls, value: str | Quantization | None) -> Quantization | None:
        """`value` as a Quantization: a scheme's name, a Quantization (made again from its fields, and so
        checked again: one whose fields were forced past the frozen dataclass is refused), or None (no
        quantization)."""
        if value is None:
            return None
        if isinstance(value, Quantization):
            return dataclasses.replace(value)
        if not isinstance(value, str):
            raise ValueError(
                f"quantization must be one of {', '.join(SCHEMES)}, an arjet.Quantization or None, got {value!r}"
            )
        return cls(value)

    def check(self, device: torch.device | str, dtype: torch.dtype | None = None) -> None:
        """Refuse, in one line, a scheme that cannot run on `device` (with weights in `dtype`, when known),
        or torchao missing."""
        import torch

        self.check_installed()
        device = torch.device(device)
        if device.type == "cuda" and not torch.cuda.is_available():
            device = torch.device("cpu")  # what the weights would be quantized on here
        if self.scheme == "int4" and device.type != "cuda":
            raise ValueError(
                f"int4 quantization has no kernel on {device.type} in torchao (its int4 layouts run on CUDA "
                "only); use quantization='int8' here, or int4 on a CUDA GPU"
            )
        if self.scheme == "int4" and dtype not in (None, torch.bfloat16):
            raise ValueError(
                f"int4 quantization packs bfloat16 weights; load them with dtype=bfloat16, not {dtype}"
            )
        if self.scheme == "fp8":
            capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
            if capability is None or capability < FP8_CAPABILITY:
                found = (
                    "a CPU" if capability is None else f"compute capability {capability[0]}.{capability[1]}"
                )
                raise ValueError(
                    f"fp8 quantization needs a CUDA GPU of compute capability >= 8.9 (Ada, Hopper), not "
                    f"{found}; use quantization='int8' here"
                )

    def check_installed(self) -> None:
        """Refuse, in one line, a scheme this process cannot apply: torchao missing."""
        if not torchao_installed():
            raise TorchaoMissing(f"quantization={self.scheme!r} needs torchao: {INSTALL}")

    def config(self) -> Any:
        """torchao's config for this scheme (`quantize_(module, config)`)."""
        from torchao.quantization import Float8WeightOnlyConfig, Int4WeightOnlyConfig, Int8WeightOnlyConfig

        configs = {
            "int8": Int8WeightOnlyConfig,
            "int4": lambda: Int4WeightOnlyConfig(
                group_size=INT4_GROUP, int4_packing_format="tile_packed_to_4d"
            ),
            "fp8": Float8WeightOnlyConfig,
        }
        return configs[self.scheme]()

    def saved_bytes(self, module: nn.Module, prefixes: tuple[str, ...], dtype: torch.dtype) -> int:
        """Bytes the linear layers of `module` under `prefixes` take less quantized than in `dtype` (their
        scales aside); works on a module built on the meta device."""
        import torch

        size = torch.empty((), dtype=dtype).element_size()
        weights = (module.get_submodule(name).weight.numel() for name in linear_names(module, prefixes))
        return int(sum(count * (size - self.bytes_per_weight) for count in weights))

    def apply(self, module: nn.Module, prefixes: tuple[str, ...]) -> None:
        """Quantize, in place, the linear layers of `module` under the module paths `prefixes` (a ValueError
        when one of them is quantized already)."""
        from torchao.quantization import quantize_

        chosen = linear_names(module, prefixes)
        check_not_quantized(module, chosen)
        quantize_(module, self.config(), filter_fn=lambda _, name: name in chosen)


def torchao_installed() -> bool:
    return importlib.util.find_spec("torchao") is not None


def linear_names(module: nn.Module, prefixes: tuple[str, ...]) -> set[str]:
    """The paths of `module`'s linear layers at or under one of the module paths `prefixes`."""
    from torch import nn

    return {
        name
        for name, layer in module.named_modules()
        if isinstance(layer, nn.Linear) and any(_under(name, prefix) for prefix in prefixes)
    }


def _under(name: str, prefix: str) -> bool:
    """Whether module path `name` is `prefix` or inside it (every path is inside the root, "")."""
    return not prefix or name == prefix or name.startswith(prefix + ".")


def check_not_quantized(module: nn.Module, names: Iterable[str]) -> None:
    """Refuse, in one line, to quantize layers `names` of `module` when one of them is quantized already."""
    for name in sorted(names):
        weight = module.get_submodule(name).weight
        if is_quantized(weight):
            raise ValueError(
                f"the model is quantized already ({name} holds torchao's {type(weight).__name__}); load its float "
                "weights again to quantize them another way"
            )


def is_quantized(tensor: torch.Tensor) -> bool:
    """Whether `tensor` is a quantized weight (a tensor subclass such as torchao's), not a plain tensor."""
    import torch
    from torch import nn

    return isinstance(tensor, torch.Tensor) and type(tensor) not in (torch.Tensor, nn.Parameter)


def weight_bytes(module: nn.Module) -> int:
    """Bytes `module`'s parameters and buffers take, a quantized weight counted by the tensors it holds
    (its integer data, scales and zero points), each shared tensor once."""
    seen: dict[int, int] = {}
    for tensor in (*module.parameters(), *module.buffers()):
        seen.setdefault(id(tensor), tensor_bytes(tensor))
    return sum(seen.values())


def tensor_bytes(tensor: torch.Tensor) -> int:
    """Bytes `tensor` takes; a quantized one's are the tensors it holds (integer data, scales, zero points)."""
    import torch

    if not is_quantized(tensor):
        return tensor.numel() * tensor.element_size()
    names, _ = tensor.__tensor_flatten__()
    inner = (getattr(tensor, name) for name in names)
    return sum(tensor_bytes(t) for t in inner if isinstance(t, torch.Tensor))
