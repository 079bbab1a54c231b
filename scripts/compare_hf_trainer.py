"""A Hugging Face `transformers.Trainer` fine-tuning run on 2 workers of Ember's TorchTrainer, on
Ray Train 2.60's, and alone in one process (the limit), each side in a fresh interpreter.

The model is a 2-layer BERT for sequence classification built from a config (no hub download);
the dataset is synthetic, made in the script: `-n` sequences of 32 token ids, labelled by
whether token 0 is even. On Ember and Ray each of the 2 ranks runs `transformers.Trainer` with
`prepare_trainer` and `RayTrainReportCallback` (one checkpoint saved and reported at the end) on
the process group the TorchTrainer set up, with OMP_NUM_THREADS=1 per rank; the Trainer shards
the dataset with its DistributedSampler. The lone Trainer gets the same global batch (2 x 16)
and both cores (OMP_NUM_THREADS=2).

Per side and trial it prints the Trainer's own `train_samples_per_second` (rank 0's: all ranks'
samples over `train()`'s wall time, the checkpoint save included) and the whole run's wall
seconds, from the interpreter's start to the end of `fit()` (imports, cluster and worker
start-up included; cluster shutdown excluded). Trials alternate the order; medians are shown.

    .venv/bin/python scripts/compare_hf_trainer.py [-n 2048] [--trials 3] \\
        [--ray-python /path/to/ray-venv/bin/python]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

T0 = time.perf_counter()
SEQ, VOCAB, BATCH, WORKERS = 32, 512, 16, 2


def hf_fit(config: dict) -> dict | None:
    """One rank's (or the lone process's) Trainer run; returns rank 0's train() metrics."""
    import importlib

    import torch
    import transformers

    side, world = config["side"], config["world"]
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
        max_position_embeddings=SEQ, num_labels=2))
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (config["n"], SEQ), generator=g)
    labels = (ids[:, 0] % 2 == 0).long()

    class Synthetic(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(ids)

        def __getitem__(self, i: int) -> dict:
            return {"input_ids": ids[i], "labels": labels[i]}

    args = transformers.TrainingArguments(
        output_dir=config["out"], num_train_epochs=1, per_device_train_batch_size=BATCH * WORKERS // world,
        learning_rate=5e-4, logging_steps=10, save_strategy="steps", save_steps=10**9, report_to=[],
        use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Synthetic())
    rank = 0
    if side != "hf":
        hf = importlib.import_module(f"{side}.train.huggingface.transformers")
        trainer.add_callback(hf.RayTrainReportCallback())
        trainer = hf.prepare_trainer(trainer)
        rank = importlib.import_module(f"{side}.train").get_context().get_world_rank()
    out = trainer.train()
    metrics = dict(out.metrics)
    if rank == 0:
        with open(os.path.join(config["out"], "metrics.json"), "w") as f:
            json.dump(metrics, f)
    return metrics


def run_side(side: str, n: int) -> dict[str, float]:
    out = tempfile.mkdtemp(prefix=f"hf_{side}_")
    if side == "hf":
        metrics = hf_fit({"side": side, "world": 1, "n": n, "out": out})
        assert metrics is not None
        return {"samples_s": metrics["train_samples_per_second"], "wall_s": time.perf_counter() - T0}
    if side == "ember":
        import ember as ray
    else:
        import ray  # type: ignore[no-redef]
    from importlib import import_module

    train = import_module(f"{side}.train")
    torch_trainer = import_module(f"{side}.train.torch")
    init = {"num_cpus": WORKERS} if side == "ember" else {"num_cpus": WORKERS, "include_dashboard": False}
    ray.init(**init)
    torch_trainer.TorchTrainer(
        hf_fit, train_loop_config={"side": side, "world": WORKERS, "n": n, "out": out},
        scaling_config=train.ScalingConfig(num_workers=WORKERS),
        run_config=train.RunConfig(name="hf", storage_path=os.path.join(out, "runs"))).fit()
    wall = time.perf_counter() - T0
    with open(os.path.join(out, "metrics.json")) as f:
        metrics = json.load(f)
    ray.shutdown()
    return {"samples_s": metrics["train_samples_per_second"], "wall_s": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--module", choices=("ember", "ray", "hf"), help="run one side here, print JSON")
    p.add_argument("--ray-python", help="python of a venv with ray (and transformers) installed")
    p.add_argument("-n", type=int, default=2048, help="synthetic sequences in the training set")
    p.add_argument("--trials", type=int, default=3)
    a = p.parse_args()
    if a.module:
        os.environ.setdefault("OMP_NUM_THREADS", "2" if a.module == "hf" else "1")
        print(json.dumps(run_side(a.module, a.n)))
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _side_by_side import alternate

    sides = {"ember": sys.executable, **({"ray": a.ray_python} if a.ray_python else {}), "hf": sys.executable}
    results = alternate(os.path.abspath(__file__), sides, ["-n", str(a.n)], a.trials)
    med = {s: {k: statistics.median(r[k] for r in rs) for k in ("samples_s", "wall_s")} for s, rs in results.items()}
    names = {"ember": "Ember TorchTrainer x2", "ray": "Ray 2.60 TorchTrainer x2", "hf": "transformers alone x1"}
    print(f"{a.n} samples, 1 epoch, global batch {BATCH * WORKERS}, median of {a.trials} trials")
    print(f"{'side':<26} {'samples/s':>10} {'run wall s':>11}")
    for s, m in med.items():
        print(f"{names[s]:<26} {m['samples_s']:>10.1f} {m['wall_s']:>11.1f}")
    if "ray" in med:
        print(f"Ember/Ray samples/s: {med['ember']['samples_s'] / med['ray']['samples_s']:.2f}")


if __name__ == "__main__":
    main()
