"""`arjet train drafter` on every model family: self-distillation data from the model itself, a drafter that
learns, a pipeline that saves with it and decodes with `eagle`."""

import json
import re

import pytest
import torch
from safetensors.torch import save_file

import arjet
from arjet.cli import main
from arjet.testing import tiny_pipeline
from arjet.train.configs import DrafterTrainConfig
from arjet.train.drafter import distill, drafter_loss, prompt_set

from families import guided

PROMPTS = ["a red circle", "a blue square", "a green triangle"]


def _base(tmp_path, family):
    base = tiny_pipeline(family, grid=(2, 2) if family == "janus" else (2, 3), vocab_size=8, logit_scale=3.0)
    base.save_pretrained(tmp_path / "base")
    (tmp_path / "prompts.txt").write_text("\n".join(PROMPTS))
    return base


def test_training_gives_a_pipeline_with_a_drafter_that_decodes(tmp_path, family):
    base = _base(tmp_path, family)
    args = ["train", "drafter", "--base", str(tmp_path / "base"), "--out", str(tmp_path / "out"),
            "--prompts", str(tmp_path / "prompts.txt"), "--images", "4", "--data-batch", "2",
            "--batch-size", "2", "--max-steps", "4", "--log-every", "2", "--heads", "2",
            "--val-images", "2"]  # fmt: skip
    assert main(args) == 0
    pipe = arjet.ARPipeline.from_pretrained(str(tmp_path / "out" / "pipeline"))
    assert pipe.drafter is not None and pipe.drafter.config.num_attention_heads == 2
    for key, value in base.model.state_dict().items():  # the model itself is untouched
        assert torch.equal(pipe.model.state_dict()[key], value), key
    codes = pipe(
        "a red circle", sampler="eagle:window=4,tree_width=1,tree_depth=1", seed=0, output_type="latent"
    ).codes
    assert (codes >= 0).all()
    log = [json.loads(line) for line in (tmp_path / "out" / "train_log.jsonl").read_text().splitlines()]
    assert log[0]["images"] == 4 and log[0]["sequences"] == 4 * (2 if guided(family) else 1)  # a row each
    assert [record["step"] for record in log[1:]] == [2, 4]
    assert {"val_p_loss", "val_accept"} <= set(log[1])
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    best = max(log[1:], key=lambda record: record["val_accept"])
    assert metrics["best_step"] == best["step"] and metrics["val_accept"] == best["val_accept"]
    assert (tmp_path / "out" / "drafter" / "config.json").is_file()


def test_the_drafter_kept_is_the_best_on_the_held_out_images(tmp_path):
    """Scored at every log line on held-out sequences; the weights returned are those of the best score,
    not the last step's (a small set overfits)."""
    from arjet.train.drafter import _validate, fit_drafter
    from arjet.train.scaffold import TrainingRun

    pipe = tiny_pipeline("emu3", grid=(2, 3), vocab_size=8, logit_scale=3.0)
    config = DrafterTrainConfig(
        data_batch=3, data_sampler="ar", batch_size=2, max_steps=8, log_every=1, lr=3e-2, out=str(tmp_path)
    )
    data = distill(pipe, PROMPTS[:2], config)
    held_out = distill(pipe, PROMPTS[2:], config, seeds=[99])
    run = TrainingRun(config, "drafter", show=False)
    drafter, _, parts = fit_drafter(pipe, *data, config, run, held_out=held_out)
    log = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    scores = [record["val_accept"] for record in log]
    assert len(scores) == 8 and parts["val_accept"] == max(scores)
    scale = pipe.checkpoint_guidance_scale()
    again = _validate(drafter, pipe.session_adapter(), held_out, config, scale if scale != 1 else None)
    assert again["val_accept"] == pytest.approx(max(scores), abs=1e-6)


def test_the_data_are_the_sessions_hidden_states_at_each_cell():
    """`hidden[:, c]` is what predicted cell `c`: the model's code head over it gives cell `c`'s logits."""
    pipe = tiny_pipeline("emu3", grid=(2, 3), vocab_size=8, logit_scale=3.0)
    config = DrafterTrainConfig(images=2, data_batch=2, data_sampler="ar")
    hidden, codes = distill(pipe, PROMPTS[:2], config)
    assert hidden.shape[:2] == codes.shape == (4, 6) and hidden.dtype == torch.bfloat16
    again = pipe(PROMPTS[:2], sampler="ar", seed=[0, 1], output_type="latent").codes.flatten(1)
    assert torch.equal(codes[::2], again) and torch.equal(codes[1::2], again)  # cond and uncond rows
    logits = pipe.session_adapter().code_logits(hidden.float())
    assert torch.isfinite(logits).all()


def test_a_data_dir_keeps_each_batch_and_a_later_run_reads_it_back(tmp_path, monkeypatch):
    """Batches are written once and read back by a run with the same base, sampler, prompts and seeds;
    other seeds make new batches."""
    import arjet.train.drafter as module

    pipe = tiny_pipeline("emu3", grid=(2, 3), vocab_size=8, logit_scale=3.0)
    config = DrafterTrainConfig(data_batch=2, data_sampler="ar", data_dir=str(tmp_path / "data"))
    hidden, codes = distill(pipe, PROMPTS[:3], config)
    assert len(list((tmp_path / "data").glob("*.safetensors"))) == 2  # batches of 2 and 1

    def generate(*args):
        raise AssertionError("a kept batch was generated again")

    with monkeypatch.context() as patch:
        patch.setattr(module, "_distill_batch", generate)
        again = distill(pipe, PROMPTS[:3], config)
    assert torch.equal(again[0], hidden) and torch.equal(again[1], codes)
    distill(pipe, PROMPTS[:2], config, seeds=[7, 8])
    assert len(list((tmp_path / "data").glob("*.safetensors"))) == 3


def test_the_loss_has_both_parts_and_reaches_the_drafters_weights():
    """EAGLE's loss: the hidden-state fit plus the next-code cross-entropy, differentiable through the
    drafter's block (the model's head and embeddings stay frozen)."""
    pipe = tiny_pipeline("janus", grid=(2, 2), vocab_size=8, logit_scale=3.0)
    hidden, codes = distill(pipe, PROMPTS[:2], DrafterTrainConfig(data_batch=2, data_sampler="ar"))
    from arjet.addons.drafter import Drafter

    drafter = Drafter.for_adapter(pipe.session_adapter())
    loss, parts = drafter_loss(drafter, pipe.session_adapter(), hidden.float(), codes, 0.1)
    assert loss.item() > 0 and set(parts) == {"v_loss", "p_loss", "top1", "accept"}
    loss.backward()
    assert drafter.fc.weight.grad is not None and drafter.fc.weight.grad.abs().sum() > 0


def test_the_guided_loss_compares_the_cfg_mixed_distributions():
    """With a guidance scale the next-code loss is the cross-entropy between the mixed distributions of each
    image's two rows (what decoding draws from), not the mean over the rows' own."""
    from arjet.addons.drafter import Drafter

    pipe = tiny_pipeline("janus", grid=(2, 2), vocab_size=8, logit_scale=3.0)
    adapter = pipe.session_adapter()
    hidden, codes = distill(pipe, PROMPTS[:2], DrafterTrainConfig(data_batch=2, data_sampler="ar"))
    assert hidden.shape[0] == 4  # two rows an image, side by side
    drafter = Drafter.for_adapter(adapter)
    hidden = hidden.float()
    _, guided = drafter_loss(drafter, adapter, hidden, codes, 0.1, guidance_scale=3.0)
    _, rows = drafter_loss(drafter, adapter, hidden, codes, 0.1)

    def mixed(states):
        cond, uncond = adapter.code_logits(states).float().view(2, 2, *states.shape[1:-1], -1).unbind(1)
        return uncond + 3.0 * (cond - uncond)

    with torch.no_grad():
        predicted = drafter(adapter.embed_codes(codes), hidden)[:, :-1]
        target = mixed(hidden[:, 1:]).softmax(-1)
        expected = -(target * mixed(predicted).log_softmax(-1)).sum(-1).mean()
    assert guided["p_loss"] == pytest.approx(expected.item(), rel=1e-5)
    assert guided["p_loss"] != pytest.approx(rows["p_loss"], rel=1e-3)


def test_the_training_time_test_scores_each_depth_on_the_drafters_own_outputs():
    """`depths=3`: depth 1 is the teacher-forced loss; depths 2 and 3 score `Drafter.unrolled`'s outputs on
    the positions that have a committed one behind them; the loss is the mean and reaches the weights."""
    from arjet.addons.drafter import Drafter

    pipe = tiny_pipeline("janus", grid=(3, 3), vocab_size=8, logit_scale=3.0)
    adapter = pipe.session_adapter()
    hidden, codes = distill(pipe, PROMPTS[:2], DrafterTrainConfig(data_batch=2, data_sampler="ar"))
    hidden = hidden.float()
    torch.manual_seed(0)
    drafter = Drafter.for_adapter(adapter)
    one_loss, one = drafter_loss(drafter, adapter, hidden, codes, 0.1, guidance_scale=3.0)
    loss, parts = drafter_loss(drafter, adapter, hidden, codes, 0.1, guidance_scale=3.0, depths=3)
    assert parts["accept_1"] == pytest.approx(one["accept"], rel=1e-5)
    assert parts["accept"] == pytest.approx((parts["accept_1"] + parts["accept_2"] + parts["accept_3"]) / 3)
    with torch.no_grad():
        deep = drafter.unrolled(adapter.embed_codes(codes), hidden, 3)[2][:, 2:-1]  # committed 0.. drafts 3..
        cond, uncond = (
            adapter.code_logits(torch.cat([deep, hidden[:, 3:]])).float().view(2, 2, 2, -1, 8).unbind(2)
        )
        mixed = uncond + 3.0 * (cond - uncond)
        expected = torch.minimum(mixed[0].softmax(-1), mixed[1].softmax(-1)).sum(-1).mean()
    assert parts["accept_3"] == pytest.approx(expected.item(), rel=1e-5)
    assert loss.item() != pytest.approx(one_loss.item())
    loss.backward()
    assert drafter.fc.weight.grad.abs().sum() > 0


def test_prompt_sets_read_text_json_coco_and_jsonl(tmp_path):
    (tmp_path / "p.txt").write_text("a\n\nb\n")
    (tmp_path / "p.json").write_text(json.dumps(["a", "b"]))
    (tmp_path / "coco.json").write_text(json.dumps({"annotations": [{"caption": "a"}, {"caption": "b"}]}))
    (tmp_path / "p.jsonl").write_text('{"prompt": "a"}\n{"caption": "b"}\n')
    for name in ("p.txt", "p.json", "coco.json", "p.jsonl"):
        assert prompt_set(str(tmp_path / name), 3, 0) == ["a", "b", "a"], name
    shapes = prompt_set("shapes", 4, 0)
    assert len(shapes) == 4 and shapes == prompt_set("shapes", 4, 0)
    with pytest.raises(FileNotFoundError, match="no such file"):
        prompt_set(str(tmp_path / "missing.txt"), 1, 0)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("deep.json", "[" * 100_000, "deep.json holds JSON nested deeper than 64 levels"),
        ("deep.jsonl", '{"prompt": "a"}\n' + "[" * 100_000, "deep.jsonl, line 2 holds JSON nested deeper"),
        ("bad.json", '["a", ', "bad.json is not valid JSON (Expecting value at column 7)"),
        ("list.jsonl", '{"prompt": "a"}\n[1]\n', "list.jsonl: a record is not a JSON object, got [1]"),
        ("coco.json", '{"annotations": 3}', "coco.json: 'annotations' must be a list"),
        ("number.json", "3", "number.json holds neither a list of prompts nor COCO captions"),
    ],
)
def test_a_prompt_file_that_is_not_prompts_is_named(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / message}")):
        prompt_set(str(tmp_path / name), 1, 0)


def test_kept_data_that_is_cut_short_is_named_not_read(tmp_path):
    from arjet.train.drafter import _stored_batch

    path = tmp_path / "batch.safetensors"
    save_file({"hidden": torch.zeros(2, 3, 4), "codes": torch.zeros(2, 3, dtype=torch.long)}, str(path))
    hidden, codes = _stored_batch(path)
    assert hidden.shape == (2, 3, 4) and codes.shape == (2, 3)
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(ValueError, match=re.escape(f"{path} is not a readable safetensors file")):
        _stored_batch(path)
    save_file({"other": torch.zeros(1)}, str(path))
    with pytest.raises(
        ValueError, match=re.escape(f"{path} holds ['other'], not a batch's hidden and codes")
    ):
        _stored_batch(path)


def _train_in_process(rank: int, port: int, tmp_path, results) -> None:
    """One of two training processes, as `accelerate launch` / `torchrun` start them (their environment)."""
    import os

    from arjet.train.drafter import train_drafter

    os.environ.update(
        WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    config = DrafterTrainConfig(
        base=str(tmp_path / "base"),
        out=str(tmp_path / "out"),
        prompts=str(tmp_path / "prompts.txt"),
        images=5,
        data_batch=2,
        data_sampler="ar",
        batch_size=2,
        heads=2,
        max_steps=3 if rank == 0 else 6,  # the first to stop stops both, at the same step
        log_every=1,
        threads=1,
    )
    train_drafter(config)
    results.put(rank)


@pytest.mark.slow
def test_two_processes_share_the_images_and_stop_together(tmp_path):
    """Under a launcher's environment: each process makes its share of the 5 images, and the budget of the
    first to run out ends both (the other would wait forever for its gradients otherwise)."""
    import multiprocessing

    from ports import free_port

    _base(tmp_path, "emu3")
    # spawned, not forked: a fork of a process that has run autograd (an earlier test) cannot use it
    context, port = multiprocessing.get_context("spawn"), free_port()
    results = context.Queue()
    workers = [context.Process(target=_train_in_process, args=(r, port, tmp_path, results)) for r in range(2)]
    for worker in workers:
        worker.start()
    try:
        finished = sorted(results.get(timeout=240) for _ in workers)
    finally:
        for worker in workers:
            worker.join(timeout=60)
            if worker.is_alive():
                worker.kill()
    assert finished == [0, 1] and all(worker.exitcode == 0 for worker in workers)
    log = [json.loads(line) for line in (tmp_path / "out" / "train_log.jsonl").read_text().splitlines()]
    assert log[0]["images"] == 5 and log[0]["sequences"] == 5 * 2  # 3 + 2 images, two CFG rows each
    assert [record["step"] for record in log[1:]] == [1, 2, 3]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["processes"] == 2 and metrics["steps"] == 3
    pipe = arjet.ARPipeline.from_pretrained(str(tmp_path / "out" / "pipeline"))
    assert pipe.drafter is not None


def test_a_process_shard_takes_every_countth_item():
    from arjet.train.processes import Processes

    items = list(range(7))
    shards = [Processes(rank, 3).shard(items) for rank in range(3)]
    assert shards == [[0, 3, 6], [1, 4], [2, 5]] and Processes().shard(items) == items

    class Run:  # a `TrainingRun`'s steps and clock
        seconds = 1.5

        def steps(self):
            yield from range(3)

    assert list(Processes().steps(Run())) == [(0, 1.5), (1, 1.5), (2, 1.5)]


def test_a_launch_with_too_few_images_or_a_fixed_gpu_is_refused_before_any_process_waits(
    tmp_path, monkeypatch
):
    from arjet.train.drafter import train_drafter
    from arjet.train.processes import Processes

    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "0")
    config = DrafterTrainConfig(base=str(tmp_path / "absent"), out=str(tmp_path / "out"), images=2)
    with pytest.raises(ValueError, match=r"--images 2: at least one per process \(3 processes\)"):
        train_drafter(config)
    with pytest.raises(ValueError, match="--device cuda:1: with 3 processes each takes its own GPU"):
        Processes.from_environment("cuda:1")
