"""A drafter: a one-layer EAGLE-style head (Li et al., 2024; what LANTERN and LANTERN++ train) that reads
the target model's last hidden state and proposes the next image code.

For the pair `(h_t, x_{t+1})` (the target's hidden state after its final norm at the input of cell `t`, and
the code of cell `t + 1`) the head fuses `z = fc(cat[e(x_{t+1}), h_t])` (the embedding first, as in the
official checkpoints), runs one decoder block over the pairs so far, and returns its output `h^_{t+1}` (no
final norm): an estimate of the target's next hidden state, whose next-code logits come from the
target's own code head (`ModelAdapter.code_logits`) and whose code embeddings are the target's input
embeddings of image codes (`ModelAdapter.embed_codes`). The drafter therefore holds only `fc` and the block.

`block="llama"` is a Llama block (what `arjet train drafter` trains for any family); `block="chameleon"` is
Chameleon's (per-head query / key layer norms), the block of the drafters LANTERN released for
Lumina-mGPT and Anole (`arjet convert-drafter` reads them). The module is a pipeline component, `pipe.drafter`,
saved and loaded as safetensors like the pipeline's other components; its presence is the capability
"drafter" that `eagle` and the drafter forms of `lantern` / `lantern++` need.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin
from torch import nn

from .. import checks
from ..limits import MAX_POSITIONS
from ..machine import check_fits_in_memory
from ..session.adapter import ModelAdapter
from ..session.decoder import LlamaStackDecoder
from ..weights import check_finite

BLOCKS = ("llama", "chameleon")


class Drafter(ModelMixin, ConfigMixin):
    """`hidden_size`: the target's; `intermediate_size`, `num_attention_heads`, `num_key_value_heads`: the
    block's; `block`: `"llama"` or `"chameleon"`; `fc_bias`: whether the fusion has a bias (the official
    drafters do); `input_norm`: whether the block normalises its input (EAGLE-1's LlamaGen drafter does not);
    `max_position_embeddings`: its rotary positions, at most `limits.MAX_POSITIONS`."""

    @register_to_config
    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        num_attention_heads: int,
        num_key_value_heads: int | None = None,
        rms_norm_eps: float = 1e-6,
        rope_theta: float = 10000.0,
        max_position_embeddings: int = 16384,
        block: str = "llama",
        fc_bias: bool = True,
        input_norm: bool = True,
    ):
        super().__init__()
        if block not in BLOCKS:
            raise ValueError(f"block must be one of {', '.join(BLOCKS)}, got {block!r}")
        checks.integer("max_position_embeddings", max_position_embeddings, 1, MAX_POSITIONS)
        if hidden_size % num_attention_heads:
            raise ValueError(
                f"hidden_size={hidden_size} is not a multiple of num_attention_heads={num_attention_heads}"
            )
        self.fc = nn.Linear(2 * hidden_size, hidden_size, bias=fc_bias)
        block_config = _block_config(
            block,
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_attention_heads=num_attention_heads,
            num_key_value_heads=num_key_value_heads or num_attention_heads,
            rms_norm_eps=rms_norm_eps,
            rope_theta=rope_theta,
            max_position_embeddings=max_position_embeddings,
        )
        self.block_config = block_config
        self.layers = nn.ModuleList([_block_class(block)(block_config, 0)])
        if not input_norm:
            self.layers[0].input_layernorm = nn.Identity()
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        self.rotary_emb = LlamaRotaryEmbedding(config=block_config)

    @classmethod
    def for_adapter(
        cls,
        adapter: ModelAdapter,
        *,
        intermediate_size: int | None = None,
        num_attention_heads: int = 4,
        device: torch.device | str | None = None,
        **kwargs,
    ) -> Drafter:
        """A randomly initialised drafter (on the CPU) sized for the target behind `adapter` on `device`
        (`sizes_for`)."""
        sizes = cls.sizes_for(
            adapter,
            intermediate_size=intermediate_size,
            num_attention_heads=num_attention_heads,
            device=device,
        )
        return cls(**sizes, **kwargs)

    @classmethod
    def sizes_for(
        cls,
        adapter: ModelAdapter,
        *,
        intermediate_size: int | None = None,
        num_attention_heads: int = 4,
        device: torch.device | str | None = None,
    ) -> dict[str, int]:
        """The sizes of a new drafter for the target behind `adapter`: its width (`target_width`),
        `intermediate_size` (default twice that width) and `num_attention_heads`, so that a drafter of these
        sizes can then be built on the meta device to check it fits (`check_fits`); `device` is the model's."""
        width = cls.target_width(adapter, device)
        return {
            "hidden_size": width,
            "intermediate_size": intermediate_size or 2 * width,
            "num_attention_heads": num_attention_heads,
        }

    @staticmethod
    def target_width(adapter: ModelAdapter, device: torch.device | str | None = None) -> int:
        """The width of the target's code embeddings (and hidden states), which a drafter's `hidden_size` must
        be: measured by one embedding on `device`, the model's (not every family's embeds on the meta
        device)."""
        with torch.no_grad():
            return adapter.embed_codes(torch.zeros(1, 1, dtype=torch.long, device=device)).shape[-1]

    def check_target(self, adapter: ModelAdapter, device: torch.device | str | None = None) -> None:
        """Refuse to draft for the target behind `adapter` (on `device`) when this drafter's width is not its
        width (`target_width`; a drafter of another model): a ValueError naming both, instead of a shape
        error in the first forward of a decode."""
        width = self.target_width(adapter, device)
        if self.config.hidden_size != width:
            raise ValueError(
                f"the drafter has hidden_size={self.config.hidden_size}, but this model's hidden states are "
                f"{width} wide: a drafter drafts only for the model it was trained for; use one trained for this "
                "model (`arjet train drafter` trains one)"
            )

    @classmethod
    def check_fits(cls, what: str, config: Any, dtype: Any = None, **options: Any) -> None:
        """Refuse, before anything is allocated, a drafter of `config` (its arguments, or a saved
        config.json's contents) that would not fit in memory, or that no drafter has: a ValueError naming
        `what` (`machine.check_fits_in_memory`; `options`: its `device` and `copies`)."""
        if not isinstance(config, dict):
            raise ValueError(f"{what} is not a drafter's config (a JSON object of its sizes)")
        dtype = dtype if isinstance(dtype, torch.dtype) else None
        check_fits_in_memory(what, lambda: cls.from_config(config), dtype, **options)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, **kwargs: Any) -> Drafter:
        """diffusers' loader, after a local folder's files are checked (`checks.check_checkpoint_files`: one
        that is not a regular file, cut short, malformed or nested too deep is a ValueError naming it) and the
        drafter its config.json describes is checked against free memory (`check_fits`), before anything is
        allocated; weights that are not finite are then refused (`weights.check_finite`)."""
        folder = Path(pretrained_model_name_or_path).expanduser() / (kwargs.get("subfolder") or "")
        if folder.is_dir():  # a FIFO or a device in place of a file blocks the loader, or is taken as missing
            checks.check_checkpoint_files("the drafter", folder)
        config = folder / "config.json"
        if config.is_file():
            dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
            cls.check_fits(f"the drafter config {config}", checks.read_json(config), dtype)
        loaded = super().from_pretrained(pretrained_model_name_or_path, **kwargs)
        check_finite(
            f"the weights of the drafter in {folder}", loaded[0] if isinstance(loaded, tuple) else loaded
        )
        return loaded

    def fuse(self, code_embeddings: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """`fc(cat[e(x_{t+1}), h_t])` for `[..., d]` each."""
        dtype = self.fc.weight.dtype
        return self.fc(torch.cat([code_embeddings.to(dtype), hidden.to(dtype)], -1))

    def stack(self) -> LlamaStackDecoder:
        """The block as a static-cache decoder (`arjet.session.decoder`): no final norm, Chameleon's query /
        key norms for `block="chameleon"`; one per decode, as the target's."""
        backbone = SimpleNamespace(
            config=self.block_config, layers=self.layers, rotary_emb=self.rotary_emb, norm=None
        )
        return LlamaStackDecoder(backbone, qk_norm=self.config.block == "chameleon", final_norm=False)

    def forward(self, code_embeddings: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """Teacher-forced outputs `[N, m, d]` for whole sequences of pairs (`[N, m, d]` each, position `j` at
        `j`, causal): what training fits to the target's next hidden states."""
        return self.unrolled(code_embeddings, hidden, 1)[0]

    def unrolled(self, code_embeddings: torch.Tensor, hidden: torch.Tensor, depths: int) -> torch.Tensor:
        """Outputs `[depths, N, m, d]` as drafting at each depth computes them (EAGLE-3's training-time test).
        Depth 0 is `forward`. At depth `k`, position `j` drafts `k` steps past the last committed position
        `j - k`: its pair's hidden state is the drafter's own output at depth `k - 1`, position `j - 1`, and it
        attends to the teacher-forced pairs up to `j - k` and to its chain's pairs at depths `1..k` (positions
        `j - k + 1 .. j`), as in a draft tree. Rows `j < k` have no committed position: not meaningful. One
        pass over all depths gives the outputs (and the gradient); the passes before it, without gradient, give
        each depth's inputs."""
        rows, length, _ = hidden.shape
        device = hidden.device
        position = torch.arange(length, device=device)
        depth = torch.arange(depths, device=device)
        query_depth, query_position = depth.repeat_interleave(length), position.repeat(depths)
        key_depth, key_position = query_depth[None, :], query_position[None, :]
        anchor = (query_position - query_depth)[:, None]  # the last committed position
        sees = ((key_depth == 0) & (key_position <= anchor)) | (
            (key_depth >= 1) & (key_depth <= query_depth[:, None]) & (key_position == anchor + key_depth)
        )
        mask = torch.zeros(sees.shape, dtype=self.fc.weight.dtype, device=device)
        mask = mask.masked_fill(~sees, torch.finfo(mask.dtype).min)
        stack = self.stack()

        def run(inputs: torch.Tensor) -> torch.Tensor:  # the first depths' inputs `[rows, width, d]`
            width = inputs.shape[1]
            slots = torch.arange(width, device=device).expand(rows, width)
            cache = stack.new_cache(rows, width)
            positions = query_position[:width].expand(rows, width)
            return stack.forward(
                cache, inputs, positions, slots, mask[None, None, :width, :width].expand(rows, 1, -1, -1)
            )

        inputs = self.fuse(code_embeddings, hidden)
        for _ in range(1, depths):
            with torch.no_grad():  # a depth's inputs carry no gradient back into the depth before it
                previous = run(inputs)[:, -length:].roll(1, 1)  # the last depth so far, one position back
            inputs = torch.cat([inputs, self.fuse(code_embeddings, previous)], 1)
        out = run(inputs)
        return out.view(rows, depths, length, -1).transpose(0, 1)


def _block_class(block: str) -> type:
    if block == "chameleon":
        from transformers.models.chameleon.modeling_chameleon import ChameleonDecoderLayer

        return ChameleonDecoderLayer
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    return LlamaDecoderLayer


def _block_config(block: str, **sizes):
    """The transformers config of one block (no vocabulary: the target's embeddings and head are used)."""
    if block == "chameleon":
        from transformers import ChameleonConfig as Config
    else:
        from transformers import LlamaConfig as Config
    return Config(
        num_hidden_layers=1,
        vocab_size=1,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        attention_bias=False,
        mlp_bias=False,
        **sizes,
    )
