"""Prompt helpers shared by the pipelines: words the text tokenizer cannot read, left-padding id rows."""

from __future__ import annotations

import warnings

import torch

from ..session import Prefix


def left_pad_rows(
    rows: list[list[int]],
    pad_id: int,
    device: torch.device | str,
    hidden: list[list[bool]] | None = None,
) -> Prefix:
    """Left-pad `rows` to one length. `hidden[i][j]` (same shape as rows) hides token j of row i from
    every later token, e.g. the prompt of an unconditional row."""
    length = max(len(row) for row in rows)
    ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    visible = torch.zeros(len(rows), length, dtype=torch.bool)
    pad = torch.zeros(len(rows), dtype=torch.long)
    for i, row in enumerate(rows):
        start = length - len(row)
        ids[i, start:] = torch.tensor(row, dtype=torch.long)
        visible[i, start:] = True if hidden is None else ~torch.tensor(hidden[i], dtype=torch.bool)
        pad[i] = start
    return Prefix(ids.to(device), visible.to(device), pad.to(device))


def unknown_words(tokenizer, text: str) -> list[str]:
    """The pieces of `text` that a fast text tokenizer can only encode as its unknown token."""
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is None or not getattr(tokenizer, "is_fast", False):
        return []
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    pairs = zip(encoding["input_ids"], encoding["offset_mapping"], strict=True)
    return [text[start:end] for token, (start, end) in pairs if token == unk]


def warn_unknown_words(tokenizer, prompts: list[str]) -> None:
    """Warn once per prompt that has words outside the text tokenizer's vocabulary (a small word-level
    vocabulary, like the built-in model's, reads them all as one unknown token)."""
    for text in dict.fromkeys(prompts):
        words = unknown_words(tokenizer, text)
        if words:
            warnings.warn(
                f"prompt {text!r}: the text tokenizer does not know {', '.join(map(repr, words))}; "
                "the model reads each as its unknown token",
                UserWarning,
                stacklevel=4,  # past __call__ and its torch.no_grad wrapper, to the caller
            )
