"""`arjet train sjd2` on every model family, from a JSON-lines data set, with full and LoRA fine-tuning."""

import json

import numpy as np
import PIL.Image
import pytest
import torch

import arjet
from arjet.cli import main
from arjet.testing import tiny_pipeline

from ports import free_port
from stats import drawn


def _data_set(folder, size, count=4, images=True):
    """Prompt / image records; without `images`, prompts alone (trained on the model's own codes)."""
    height, width = size
    lines = []
    for i in range(count):
        record = {"prompt": f"a red circle number {i}"}
        if images:
            pixels = np.random.default_rng(i).integers(0, 256, (height, width, 3), dtype=np.uint8)
            PIL.Image.fromarray(pixels).save(folder / f"{i}.png")
            record["image"] = f"{i}.png"
        lines.append(json.dumps(record))
    (folder / "data.jsonl").write_text("\n".join(lines))
    return folder / "data.jsonl"


def _fine_tune(tmp_path, family, *extra):
    base = tiny_pipeline(family, grid=(2, 2) if family == "janus" else (2, 3), vocab_size=8)
    base.save_pretrained(tmp_path / "base")
    # GLM-Image trains on its own codes: arjet does not run its image tokenizer (its vision encoder)
    data = _data_set(tmp_path, base.default_size(), images=family != "glm_image")
    args = ["train", "sjd2", "--base", str(tmp_path / "base"), "--out", str(tmp_path / "out"), "--data", str(data),
            "--batch-size", "2", "--max-steps", "2", "--levels", "2", "--bf16", "false", *extra]  # fmt: skip
    assert main(args) == 0
    return base, arjet.ARPipeline.from_pretrained(str(tmp_path / "out" / "pipeline"))


def _changed(before: dict, after: dict) -> set[str]:
    return {name for name, tensor in after.items() if not torch.equal(tensor, before[name])}


@pytest.mark.parametrize("lora_rank", [0, 2], ids=["full", "lora"])
def test_fine_tune_of_each_family_gives_an_sjd2_checkpoint(tmp_path, family, lora_rank):
    base, tuned = _fine_tune(tmp_path, family, "--lora-rank", str(lora_rank))
    assert tuned.noise_conditioning is not None and tuned.noise_conditioning.config.levels == 2
    before, after = base.model.state_dict(), tuned.model.state_dict()
    assert set(after) == set(before)  # a LoRA fine-tune is merged back: no adapter weights are left
    changed = _changed(before, after)
    # the image tokenizer is kept, norm statistics included
    assert not any("vqmodel" in name for name in changed)
    attention = {
        name
        for name in changed
        if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"))
    }
    assert attention, "the attention projections were not trained"
    if lora_rank:
        assert changed == attention  # LoRA touches only the projections it adapts
    else:
        assert changed - attention  # a full fine-tune trains the rest too
    out = tuned("a red circle", sampler="sjd2", seed=0, output_type="latent")
    assert out.stats[0].tokens == drawn(out)[0].numel()  # a preview grid's codes too


def test_glm_image_trains_on_its_own_codes_only(tmp_path, capsys):
    """arjet does not run GLM-Image's image tokenizer (its vision encoder): image records are refused by name,
    and prompt records train the preview and target grids on the codes the base model samples itself."""
    base = tiny_pipeline("glm_image", grid=(2, 3), vocab_size=8)
    base.save_pretrained(tmp_path / "base")
    data = _data_set(tmp_path, base.default_size())
    args = ["train", "sjd2", "--base", str(tmp_path / "base"), "--out", str(tmp_path / "out"), "--data", str(data),
            "--max-steps", "1", "--bf16", "false"]  # fmt: skip
    assert main(args) == 2
    assert "GlmImagePipeline trains on its own codes" in capsys.readouterr().err


def test_images_of_another_size_are_refused_by_name(tmp_path, capsys):
    base = tiny_pipeline("emu3", grid=(2, 3), vocab_size=8)
    base.save_pretrained(tmp_path / "base")
    height, width = base.default_size()
    data = _data_set(tmp_path, (height + 8, width))
    args = ["train", "sjd2", "--base", str(tmp_path / "base"), "--out", str(tmp_path / "out"), "--data", str(data),
            "--max-steps", "1", "--bf16", "false"]  # fmt: skip
    assert main(args) == 2
    assert (
        f"0.png is {width} x {height + 8} pixels, not {width} x {height}; this model is fine-tuned on {width} x "
        f"{height} images: resize the data set first" in capsys.readouterr().err
    )


def _average_in_process(rank: int, port: int, results) -> None:
    import torch.distributed as dist

    from arjet.train.processes import Processes

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    reached, missed = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))
    reached.grad = torch.full((3,), float(rank + 1))
    if rank == 0:  # process 1's batch never reached this parameter
        missed.grad = torch.full((2,), 4.0)
    Processes(rank, 2).average_gradients([reached, missed])
    results.put((rank, reached.grad.tolist(), missed.grad.tolist()))
    dist.destroy_process_group()


def test_gradients_are_averaged_over_processes_even_where_one_has_none():
    import multiprocessing

    context, port = multiprocessing.get_context("fork"), free_port()
    results = context.Queue()
    workers = [context.Process(target=_average_in_process, args=(rank, port, results)) for rank in range(2)]
    for worker in workers:
        worker.start()
    got = sorted(results.get(timeout=60) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
    assert got == [(0, [1.5] * 3, [2.0] * 2), (1, [1.5] * 3, [2.0] * 2)]
