"""Training through a framework's own loop: Hugging Face ``Trainer`` or Lightning ``fit``.

``--framework hf``: a tiny ``BertForSequenceClassification`` built from a config (no download)
trained by ``transformers.Trainer`` on synthetic token ids (``Trainer`` wraps its own torch
DataLoader). ``--framework lightning``: a ``LightningModule`` MLP trained by
``lightning.Trainer.fit`` on a ``DataLoader``. Both run ``--steps`` optimizer steps and print
``LOOP_STARTED`` first and ``ITERATIONS=<n>`` (optimizer steps the framework reports) last.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")


class Tokens(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, n: int, length: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(5, vocab, (n, length), generator=g)
        self.labels = (self.ids.float().mean(dim=1) > vocab / 2).long()

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def hugging_face(steps: int) -> int:
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    config = BertConfig(
        vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=64, num_labels=2,
    )  # fmt: skip
    model = BertForSequenceClassification(config)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, max_steps=steps, per_device_train_batch_size=16,
            logging_steps=10_000, save_strategy="no", report_to=[], use_cpu=True,
            disable_tqdm=True, dataloader_num_workers=0,
        )  # fmt: skip
        trainer = Trainer(model=model, args=args, train_dataset=Tokens(4096, 32, 512))
        print("LOOP_STARTED", flush=True)
        trainer.train()
        return int(trainer.state.global_step)


def lightning_fit(steps: int) -> int:
    import lightning as L

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 2)
            )

        def training_step(self, batch: list[torch.Tensor], _i: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 32, generator=g)
    loader = DataLoader(TensorDataset(x, (x.sum(1) > 0).long()), batch_size=32)
    with tempfile.TemporaryDirectory() as out:
        trainer = L.Trainer(
            max_steps=steps, accelerator="cpu", devices=1, logger=False,
            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
            default_root_dir=out,
        )  # fmt: skip
        print("LOOP_STARTED", flush=True)
        trainer.fit(Module(), loader)
        return int(trainer.global_step)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--framework", choices=("hf", "lightning"), required=True)
    p.add_argument("--steps", type=int, default=60)
    a = p.parse_args()
    torch.manual_seed(0)
    n = hugging_face(a.steps) if a.framework == "hf" else lightning_fit(a.steps)
    print(f"ITERATIONS={n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
