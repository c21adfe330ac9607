"""Prompt helpers shared by the pipelines: prompt text in a chat template, words the text tokenizer cannot
read, left-padding id rows.

A prompt is user text, never markup: a control token written in it (`<begin_of_image>`, the end-of-sentence
token, `<|image start|>`, ...) is tokenized as the plain characters it is made of, so a prompt cannot end the
turn, open an image or smuggle in codes. Only the family's own template places control tokens.
"""

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


def control_tokens(tokenizer) -> list[str]:
    """The strings `tokenizer` reads as one control token wherever they appear in text: its special tokens
    and every other added token (chat markers, image and size tokens)."""
    tokens = set(getattr(tokenizer, "all_special_tokens", ()))
    get_added_vocab = getattr(tokenizer, "get_added_vocab", None)
    if callable(get_added_vocab):
        tokens.update(get_added_vocab())
    return [token for token in tokens if token]


def has_control_text(tokenizer, text: str) -> bool:
    return any(token in text for token in control_tokens(tokenizer))


def encode_with_prompt(tokenizer, before: str, prompt: str, after: str) -> list[int]:
    """Token ids of `before + prompt + after` (no BOS): control tokens written in `before` / `after` (the
    family's template) are read as such, those written in `prompt` as plain text. A prompt without any is
    tokenized in one piece, exactly as the model's reference code does."""

    def ids(text: str, plain: bool = False) -> list[int]:
        if not text:
            return []
        return tokenizer(text, add_special_tokens=False, split_special_tokens=plain)["input_ids"]

    if not has_control_text(tokenizer, prompt):
        return ids(before + prompt + after)
    return ids(before) + ids(prompt, plain=True) + ids(after)


def unknown_words(tokenizer, text: str) -> list[str]:
    """The pieces of `text` that a fast text tokenizer can only encode as its unknown token."""
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is None or not getattr(tokenizer, "is_fast", False):
        return []
    encoding = tokenizer(
        text, add_special_tokens=False, return_offsets_mapping=True, split_special_tokens=True
    )
    pairs = zip(encoding["input_ids"], encoding["offset_mapping"], strict=True)
    return [text[start:end] for token, (start, end) in pairs if token == unk]


def warn_unknown_words(tokenizer, prompts: list[str], frames: int = 0) -> None:
    """Warn once per prompt that has words outside the text tokenizer's vocabulary (a small word-level
    vocabulary, like the built-in model's, reads them all as one unknown token). `frames`: calls between the
    caller and the pipeline's `__call__` (a family's own `__call__` around it)."""
    for text in dict.fromkeys(prompts):
        words = unknown_words(tokenizer, text)
        if words:
            warnings.warn(
                f"prompt {text!r}: the text tokenizer does not know {', '.join(map(repr, words))}; "
                "the model reads each as its unknown token",
                UserWarning,
                stacklevel=4 + frames,  # past __call__ and its torch.no_grad wrapper, to the caller
            )
