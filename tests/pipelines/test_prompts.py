"""Prompt helpers: words outside the text tokenizer's vocabulary are named in a warning."""

import warnings

import pytest

from arjet.pipelines.prompts import unknown_words


def test_unknown_words_of_the_builtin_vocabulary(builtin_pipe):
    tokenizer = builtin_pipe.tokenizer
    assert unknown_words(tokenizer, "a red heart left of a Blue squircle") == ["heart", "squircle"]
    assert unknown_words(tokenizer, "three green triangles on a white background") == []


def test_the_pipeline_warns_once_per_prompt_with_unknown_words(builtin_pipe):
    with pytest.warns(
        UserWarning, match=r"prompt 'a red heart': the text tokenizer does not know 'heart'"
    ) as caught:
        builtin_pipe(["a red heart", "a red heart", "a red circle"], sampler="zipar", seed=0)
    assert sum("does not know" in str(w.message) for w in caught) == 1


def test_known_words_raise_no_warning(builtin_pipe):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        builtin_pipe("a red circle left of a blue square", sampler="zipar", seed=0)
