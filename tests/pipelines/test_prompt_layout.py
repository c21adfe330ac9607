"""Each family's exact token layout, written out from the official recipes (see docs/models.md) rather than
from the pipelines' own code: the prompt template, the size tokens on a non-square grid, the unconditional
rows and what they may attend to, the row-end token, and which vocabulary entry each image code is.

The tiny models use word-level tokenizers; the template's punctuation and the words of Emu3's suffix and
negative prompt are added to them so that every piece of a template is a token of its own (an unknown
word would become `<unk>`, and a wrong template could then still match)."""

import re

import pytest
import torch
from tokenizers import AddedToken

from arjet.pipelines import Emu3Pipeline, base
from arjet.testing import tiny_pipeline

# Emu3's recipe (baaivision/Emu3, autoregressive generation example)
EMU3_SUFFIX = " masterpiece, film grained, best quality."
EMU3_NEGATIVE = (
    "lowres, bad anatomy, bad hands, text, error, missing fingers, extra digit, fewer digits, cropped, worst "
    "quality, low quality, normal quality, jpeg artifacts, signature, watermark, username, blurry."
)


class _Stop(Exception):
    pass


def _session_inputs(pipe, monkeypatch, *args, **kwargs) -> dict:
    """What `pipe(*args, **kwargs)` hands the decoding session (prefix, layout, ...), stopping there."""
    seen = {}

    def session(adapter, layout, prefix, guidance_scale=None, **options):
        seen.update(adapter=adapter, layout=layout, prefix=prefix, guidance_scale=guidance_scale, **options)
        raise _Stop

    monkeypatch.setattr(base, "DecodingSession", session)
    with pytest.raises(_Stop):
        pipe(*args, **kwargs)
    return seen


def _words(text: str) -> list[str]:
    """How the tiny word-level tokenizers split plain text: words and punctuation, digits one by one."""
    return [
        piece for word in re.findall(r"\w+|[^\w\s]+", text.lower()) for piece in re.findall(r"\d|\D+", word)
    ]


def _add_tokens(pipe, tokens) -> None:
    new = [t for t in dict.fromkeys(tokens) if t not in pipe.tokenizer.get_vocab()]
    pipe.tokenizer.add_tokens([AddedToken(t, normalized=False) for t in new])


def _rows(pipe, prefix) -> list[list[str]]:
    """Each prefix row as token strings, its left padding removed."""
    tokens = []
    for row in range(prefix.ids.shape[0]):
        start = int(prefix.pad[row])
        assert (prefix.ids[row, :start] == pipe.tokenizer.pad_token_id).all()
        assert not prefix.visible[row, :start].any(), "left padding must be hidden"
        tokens.append(pipe.tokenizer.convert_ids_to_tokens(prefix.ids[row, start:].tolist()))
    return tokens


def _visible(prefix, row: int) -> list[bool]:
    return prefix.visible[row, int(prefix.pad[row]) :].tolist()


# -- Janus ------------------------------------------------------------------------------------------------
def test_janus_deepseek_template_and_padded_uncond_rows(monkeypatch):
    pipe = tiny_pipeline("janus", grid=(3, 3))
    _add_tokens(pipe, [":", "\n"])
    prompts = ["a red circle", "a big blue square left of a cat"]
    seen = _session_inputs(pipe, monkeypatch, prompts, guidance_scale=5.0)
    rows = _rows(pipe, seen["prefix"])
    bos, pad = "<｜begin▁of▁sentence｜>", "<｜▁pad▁｜>"
    # "<|User|>: {prompt}\n\n<|Assistant|>:" + "<begin_of_image>", BOS prepended
    expected = [
        [bos, "<|User|>", ":", *_words(p), "\n", "\n", "<|Assistant|>", ":", "<begin_of_image>"]
        for p in prompts
    ]
    assert rows[:2] == expected
    # CFG: [cond; uncond], the uncond row keeps BOS and <begin_of_image>, every other token is pad ...
    assert rows[2:] == [[bos] + [pad] * (len(row) - 2) + ["<begin_of_image>"] for row in expected]
    # ... and, as in DeepSeek's code and transformers' generate, those pads are attended
    for row in range(4):
        assert all(_visible(seen["prefix"], row))
    assert seen["layout"].grid == (3, 3) and seen["layout"].row_end_ids == ()
    assert seen["guidance_scale"] == 5.0
    # without CFG there is no uncond row
    assert len(_rows(pipe, _session_inputs(pipe, monkeypatch, prompts, guidance_scale=1.0)["prefix"])) == 2


def test_janus_codes_use_the_generation_embeddings_and_head():
    pipe = tiny_pipeline("janus", grid=(2, 2), vocab_size=6)
    adapter = pipe.session_adapter()
    codes = torch.arange(6)[None]
    generation = pipe.model.model
    expected = generation.generation_aligner(generation.generation_embeddings(codes))
    torch.testing.assert_close(adapter.embed_codes(codes), expected)
    hidden = torch.randn(1, 3, pipe.model.config.text_config.hidden_size)
    torch.testing.assert_close(adapter.code_logits(hidden), generation.generation_head(hidden))


# -- Emu3 -------------------------------------------------------------------------------------------------
def _emu3_with_the_official_texts(grid=(2, 3)):
    """A tiny Emu3 pipeline with Emu3's real prompt suffix and default negative prompt."""
    tiny = tiny_pipeline("emu3", grid=grid, vocab_size=12)
    pipe = Emu3Pipeline(
        model=tiny.model,
        tokenizer=tiny.tokenizer,
        image_area=tiny.config.image_area,
        default_height=tiny.config.default_height,
        default_width=tiny.config.default_width,
    )
    pipe.set_progress_bar_config(disable=True)
    _add_tokens(pipe, _words(EMU3_SUFFIX) + _words(EMU3_NEGATIVE))
    return pipe


def _emu3_image_prefix(height: int, width: int) -> list[str]:
    # "<|image start|>{H}*{W}<|image token|>", H and W in codes, as plain digits
    return ["<|image start|>", *str(height), "*", *str(width), "<|image token|>"]


def test_emu3_prompt_suffix_size_prefix_and_default_negative_row(monkeypatch):
    pipe = _emu3_with_the_official_texts(grid=(2, 3))
    assert pipe.config.prompt_suffix == EMU3_SUFFIX and pipe.config.default_negative_prompt == EMU3_NEGATIVE
    height, width = pipe.default_size()
    assert (height, width) == (4, 6)  # 2 rows x 3 columns of 2-px codes
    seen = _session_inputs(pipe, monkeypatch, "a red circle", guidance_scale=3.0)
    rows = _rows(pipe, seen["prefix"])
    bos = "<|extra_203|>"
    assert rows[0] == [bos, *_words("a red circle" + EMU3_SUFFIX), *_emu3_image_prefix(2, 3)]
    # the negative prompt gets the same image prefix but not the positive suffix
    assert rows[1] == [bos, *_words(EMU3_NEGATIVE), *_emu3_image_prefix(2, 3)]
    assert all(_visible(seen["prefix"], 0)) and all(_visible(seen["prefix"], 1))
    # H rows of W codes, each closed by <|extra_200|> (end of line)
    layout = seen["layout"]
    assert layout.grid == (2, 3)
    assert layout.row_end_ids == (pipe.tokenizer.convert_tokens_to_ids("<|extra_200|>"),)


def test_emu3_explicit_negative_prompts_and_a_tall_grid(monkeypatch):
    pipe = _emu3_with_the_official_texts()
    prompts = ["a red circle", "a cat"]
    seen = _session_inputs(
        pipe, monkeypatch, prompts, negative_prompt=["blurry", "text"], height=8, width=2, guidance_scale=3.0
    )
    rows = _rows(pipe, seen["prefix"])
    bos = "<|extra_203|>"
    assert rows == [
        [bos, *_words("a red circle" + EMU3_SUFFIX), *_emu3_image_prefix(4, 1)],
        [bos, *_words("a cat" + EMU3_SUFFIX), *_emu3_image_prefix(4, 1)],
        [bos, "blurry", *_emu3_image_prefix(4, 1)],
        [bos, "text", *_emu3_image_prefix(4, 1)],
    ]
    assert seen["layout"].grid == (4, 1)


def test_emu3_codes_are_the_visual_tokens():
    pipe = tiny_pipeline("emu3", grid=(2, 2), vocab_size=12)
    adapter = pipe.session_adapter()
    ids = pipe.tokenizer.convert_tokens_to_ids([f"<|visual token {code:06d}|>" for code in range(12)])
    codes = torch.tensor([[3, 0, 11, 10, 1]])
    embeddings = pipe.model.get_input_embeddings()
    torch.testing.assert_close(adapter.embed_codes(codes), embeddings(torch.tensor(ids)[codes]))
    hidden = torch.randn(1, 2, pipe.model.config.text_config.hidden_size)
    torch.testing.assert_close(adapter.code_logits(hidden), pipe.model.lm_head(hidden)[..., ids])


# -- Lumina-mGPT ------------------------------------------------------------------------------------------
def test_lumina_template_size_tokens_and_uncond_mask(monkeypatch):
    pipe = tiny_pipeline("lumina_mgpt", grid=(2, 3))  # the tiny VQGAN: one code per 32-px unit
    _add_tokens(pipe, ["\n"])
    prompts = ["a red circle", "a big blue square left of a cat"]
    seen = _session_inputs(pipe, monkeypatch, prompts, height=64, width=96, guidance_scale=3.0)
    rows = _rows(pipe, seen["prefix"])
    # "<s>Generate an image of {W}x{H} according to the following prompt:\n{prompt}<reserved08706>", then the
    # image start and the height and width in 32-px units: <reserved{8800 + n}>
    expected = [
        [
            "<s>",
            *_words("Generate an image of 96x64 according to the following prompt:"),
            "\n",
            *_words(prompt),
            "<reserved08706>",
            "<racm3:break>",
            "<reserved08802>",  # height: 64 px = 2 units
            "<reserved08803>",  # width: 96 px = 3 units
        ]
        for prompt in prompts
    ]
    assert rows[:2] == expected
    # batched CFG (SJD, Lumina-mGPT 2.0): the uncond rows hold the same tokens, but the prompt is hidden up
    # to its last token (the turn end); the image start and size tokens stay visible
    assert rows[2:] == expected
    for row, tokens in enumerate(expected):
        assert all(_visible(seen["prefix"], row))
        assert _visible(seen["prefix"], 2 + row) == [False] * (len(tokens) - 4) + [True] * 4
    layout = seen["layout"]
    assert layout.grid == (2, 3)
    assert layout.row_end_ids == (pipe.tokenizer.convert_tokens_to_ids("<reserved08799>"),)


def _chameleon_name(code: int) -> str:
    # IMGIMG + the code's decimal digits spelled with letters A (0) .. J (9) + Z
    return "IMGIMG" + "".join("ABCDEFGHIJ"[int(digit)] for digit in str(code)) + "Z"


def test_lumina_codes_are_the_imgimg_tokens():
    assert [_chameleon_name(c) for c in (0, 7, 10, 42, 8191)] == [
        "IMGIMGAZ",
        "IMGIMGHZ",
        "IMGIMGBAZ",
        "IMGIMGECZ",
        "IMGIMGIBJBZ",
    ]
    pipe = tiny_pipeline("lumina_mgpt", grid=(2, 2), vocab_size=12)
    adapter = pipe.session_adapter()
    ids = pipe.tokenizer.convert_tokens_to_ids([_chameleon_name(code) for code in range(12)])
    assert pipe.tokenizer.unk_token_id not in ids
    codes = torch.tensor([[10, 0, 11, 2, 1]])
    embeddings = pipe.model.get_input_embeddings()
    torch.testing.assert_close(adapter.embed_codes(codes), embeddings(torch.tensor(ids)[codes]))
    hidden = torch.randn(1, 2, pipe.model.config.hidden_size)
    torch.testing.assert_close(adapter.code_logits(hidden), pipe.model.lm_head(hidden)[..., ids])
