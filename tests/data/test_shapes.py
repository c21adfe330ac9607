import json

import numpy as np
import pytest

from arjet.data import (
    COLORS,
    SHAPES,
    Scene,
    ShapesDataset,
    describe,
    heldout_set,
    render,
    render_reference,
    sample_scene,
    split_item,
)
from arjet.data.dataset import HELDOUT_SIZE


def test_items_are_a_pure_function_of_split_and_index():
    first, again = ShapesDataset("train", length=4)[3], ShapesDataset("train", length=4)[3]
    assert first[1] == again[1] and first[2] == again[2]
    assert np.array_equal(first[0].numpy(), again[0].numpy())
    other = ShapesDataset("train", length=5)[4]
    assert other[1] != first[1] or not np.array_equal(other[0].numpy(), first[0].numpy())


def test_train_and_heldout_do_not_overlap():
    train = {json.dumps(split_item("train", i)[0].to_dict(), sort_keys=True) for i in range(2000)}
    heldout = {json.dumps(split_item("heldout", i)[0].to_dict(), sort_keys=True) for i in range(2000)}
    assert not train & heldout


@pytest.mark.parametrize("index", range(200))
def test_prompts_name_every_object_colour_and_shape(index):
    scene, _ = split_item("train", index)
    rng = np.random.default_rng(index)
    for _ in range(3):
        prompt = describe(scene, rng)
        for item in scene.objects:
            assert item.color in prompt and item.shape in prompt, (prompt, item)


def test_the_domain_has_what_it_promises():
    assert len(COLORS) >= 8 and {"circle", "square", "triangle", "star"} <= set(SHAPES)
    rng = np.random.default_rng(0)
    scenes = [sample_scene(rng) for _ in range(500)]
    assert {len(s.objects) for s in scenes} == {1, 2, 3, 4}
    assert {s.background.kind for s in scenes} == {"plain", "gradient", "stripes", "checker", "noise"}
    assert {s.layout for s in scenes} == {"single", "pair", "count", "group"}


def test_the_shipped_heldout_set_matches_the_generator():
    items = heldout_set()
    assert len(items) == HELDOUT_SIZE
    for item in items[:: len(items) // 50]:
        scene, prompt = split_item("heldout", item["index"])
        assert item["prompt"] == prompt and Scene.from_dict(item["scene"]) == scene


def test_renders_and_json_round_trip():
    scene, _ = split_item("train", 7)
    assert render(scene, 64).size == (64, 64) and render(scene, 128).size == (128, 128)
    assert Scene.from_dict(json.loads(json.dumps(scene.to_dict()))) == scene
    item = heldout_set(1)[0]
    assert np.array_equal(
        np.asarray(render_reference(item, 64)), np.asarray(render(Scene.from_dict(item["scene"])))
    )


def test_unknown_split_is_refused():
    with pytest.raises(ValueError, match="unknown split 'test'"):
        ShapesDataset("test")
