"""A Hugging Face `transformers.Trainer` fine-tuning a tiny GPT-2 (built offline from a config, no
hub) on 2 workers of a TorchTrainer: RayTrainReportCallback reports at each save, the reported
checkpoint holds the Trainer's files and loads back into a model, and prepare_trainer takes an
Ember Data shard as the train dataset."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("torch", reason="the train extra (torch==2.13.0) is not installed")
pytest.importorskip("transformers", reason="the llm extra (transformers) is not installed")

import ember  # noqa: E402
from ember import train  # noqa: E402
from ember.train import RunConfig, ScalingConfig  # noqa: E402
from ember.train.torch import TorchTrainer  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=4, object_store_memory=128 * 2**20)
    yield
    ember.shutdown()


def loop(config):
    import torch
    import transformers

    from ember.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=32, n_positions=16, n_embd=16, n_layer=1, n_head=2))

    def rows():
        for r in train.get_dataset_shard("train").iter_rows():
            ids = torch.tensor([(r["id"] + j) % 32 for j in range(8)])
            yield {"input_ids": ids, "labels": ids}

    class Rows(torch.utils.data.IterableDataset):
        def __iter__(self):
            return rows()

    args = transformers.TrainingArguments(
        output_dir=config["out"], max_steps=4, save_steps=2, logging_steps=1, per_device_train_batch_size=2,
        report_to=[], use_cpu=True, save_strategy="steps", disable_tqdm=True, dataloader_num_workers=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Rows())
    trainer.add_callback(RayTrainReportCallback())
    prepare_trainer(trainer).train()


def test_transformers_trainer_reports_checkpoints_on_two_workers(cluster, tmp_path):
    trainer = TorchTrainer(loop, train_loop_config={"out": str(tmp_path / "hf")},
                           scaling_config=ScalingConfig(num_workers=2),
                           datasets={"train": ember.data.range(64)},
                           run_config=RunConfig(name="hf", storage_path=str(tmp_path)))
    result = trainer.fit()
    assert result.metrics["step"] == 4 and result.metrics["loss"] > 0
    assert result.metrics_dataframe["step"].tolist() == [2, 4]
    with result.checkpoint.as_directory() as d:
        hf_dir = os.path.join(d, "checkpoint")
        assert os.path.exists(os.path.join(hf_dir, "model.safetensors"))
        import transformers

        model = transformers.GPT2LMHeadModel.from_pretrained(hf_dir)
        assert model.config.n_embd == 16


def test_prepare_trainer_refuses_what_is_not_a_trainer():
    from ember.train.huggingface.transformers import prepare_trainer

    with pytest.raises(TypeError, match="expects a transformers.Trainer"):
        prepare_trainer(object())
