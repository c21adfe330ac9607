"""Small word-level text tokenizers built with Hugging Face `tokenizers`, wrapped as transformers fast tokenizers.

Used by the built-in model (whose prompts come from a closed vocabulary) and by the tiny test pipelines.
Words are lower-cased and split on whitespace and punctuation, digits one by one; family special tokens
(`<|User|>`, `<begin_of_image>`, ...) are matched verbatim before that.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

UNKNOWN = "<unk>"


def build_word_tokenizer(
    words: Iterable[str],
    special_tokens: Iterable[str],
    *,
    bos_token: str,
    eos_token: str,
    pad_token: str,
    extra_tokens: Iterable[str] = (),
    leading_tokens: Iterable[str] = (),
    named_tokens: dict[str, str] | None = None,
    prepend: str | None = None,
    padding_side: str = "right",
) -> PreTrainedTokenizerFast:
    """A tokenizer whose ids are: `leading_tokens` (special, from id 0: a vocabulary whose image codes come
    first, as GLM-Image's), special tokens (in the given order, `<unk>` first), then `words`, then
    `extra_tokens` (matched verbatim like special tokens but not skipped when decoding). `named_tokens` gives
    the tokenizer attributes for some special tokens (`{"image_token": "<|image|>"}`); `prepend`, a special
    token added before every text encoded with `add_special_tokens=True`."""
    leading = list(dict.fromkeys(leading_tokens))
    specials = (
        leading + [UNKNOWN] + [t for t in dict.fromkeys(special_tokens) if t not in (UNKNOWN, *leading)]
    )
    extras = [t for t in dict.fromkeys(extra_tokens) if t not in specials]
    vocab: dict[str, int] = {}
    for token in [*specials, *extras, *sorted({w.lower() for w in words})]:
        vocab.setdefault(token, len(vocab))
    for name in (bos_token, eos_token, pad_token):
        if name not in vocab:
            raise ValueError(f"{name!r} must be one of the special tokens")
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNKNOWN))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)]
    )
    backend.decoder = decoders.WordPiece(prefix="##")
    backend.add_special_tokens(specials)
    backend.add_tokens(extras)
    if prepend is not None:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{prepend} $A", pair=f"{prepend} $A $B", special_tokens=[(prepend, vocab[prepend])]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=bos_token,
        eos_token=eos_token,
        pad_token=pad_token,
        unk_token=UNKNOWN,
        padding_side=padding_side,
        **({"extra_special_tokens": dict(named_tokens)} if named_tokens else {}),
    )
