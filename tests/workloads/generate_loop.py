"""Autoregressive generation that reads nothing, as a GPT sampling loop writes it (torch).

Each step crops the context, calls the model, takes the last position's logits, scales them by
a temperature, penalises the tokens already in the context, keeps the top k, samples the next
token (``softmax``, ``multinomial``) and appends it to the context (``torch.cat``): every line
after the model call works on the model's output, and what the loop feeds the model next is its
own output. Its input (from outside the model) is nothing: the prompt is built once before the
loop.

Prints ``STEPS=`` (model calls after the first) and ``HOST_FRACTION=`` (the loop's time
outside its model calls). Nothing here knows about sofa-top.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.nn import functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=6.0)
args = parser.parse_args()
torch.set_num_threads(1)
VOCAB, WIDTH, CONTEXT = 32000, 64, 64
perf = time.perf_counter


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.block = nn.TransformerEncoderLayer(WIDTH, 4, 128, batch_first=True)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.embed(idx)))


def generate(
    model: nn.Module, idx: torch.Tensor, temperature: float, top_k: int, penalty: float
) -> int:
    steps = 0
    model_s = 0.0
    t_start = perf()
    until = t_start + args.seconds
    while perf() < until:
        idx_cond = idx[:, -CONTEXT:]
        t0 = perf()
        logits = model(idx_cond)
        model_s += perf() - t0
        logits = logits[:, -1, :] / temperature
        logits[:, idx_cond[0]] /= penalty  # the tokens already in the context: less likely
        v, _ = torch.topk(logits, top_k)
        logits[logits < v[:, [-1]]] = -float("inf")
        probs = F.softmax(logits, dim=-1)
        idx_next = torch.multinomial(probs, num_samples=1)
        idx = torch.cat((idx, idx_next), dim=1)
        steps += 1
    print(f"STEPS={steps - 1}")
    print(f"HOST_FRACTION={1.0 - model_s / (perf() - t_start):.4f}", flush=True)
    return 0


net = TinyLM().eval()
prompt = torch.zeros((1, 1), dtype=torch.long)
with torch.no_grad():
    raise SystemExit(generate(net, prompt, 0.8, 200, 1.3))
