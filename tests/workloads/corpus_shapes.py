"""The loop shapes of the public inference scripts (``benchmarks/corpus``), small and timed.

``--shape``:

* ``generate``: token-by-token generation as ``word_language_model/generate.py`` writes it: the
  loop at module level, under ``torch.no_grad()``, one LSTM call per token, the next token
  sampled on the host from the output (``exp``, ``multinomial``), the input tensor refilled
  (``fill_``) and the word written out. Its input is the ``fill_`` alone.
* ``request``: one request as ``super_resolution/super_resolve.py`` serves it: PIL decodes an
  image, one model call upscales it, PIL encodes the result as a PNG. No loop.
* ``keras-predict-loop``: character-by-character generation as the Keras text-generation
  example writes it: a one-hot sample built in NumPy, ``model.predict(x)`` per character (each
  call builds Keras' data adapter and iterator for one sample), sampling in NumPy.
* ``persistent``: a ``DataLoader(num_workers=2, persistent_workers=True)`` over 4 batches an
  epoch, many epochs, the model called 20 times a batch: each epoch resumes the same workers
  and its first fetch waits for a whole batch (the later ones wait less, the other worker's
  batch being under way). Reads are slow enough (8 ms a sample) that the loop waits for input
  about half its time however busy the machine (at 4 ms it sat near the 20% input-bound bar
  and its verdict flipped with the load).

Each measures its own truth with ``perf_counter`` and prints ``PREP_FRACTION=`` (the loop's
input: building or fetching the next model input, over the loop's time), ``HOST_FRACTION=``
(the loop's time outside its model calls) and ``STEPS=``. Nothing here knows about sofa-top.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--shape", required=True)
parser.add_argument("--seconds", type=float, default=6.0)
parser.add_argument("--warmup", type=int, default=0)  # (the steps are all measured)
args = parser.parse_args()
SHAPE: str = args.shape
perf = time.perf_counter
prep = model_s = 0.0
steps = 0


def report(loop_s: float) -> None:
    print(f"STEPS={steps}")
    print(f"PREP_FRACTION={prep / loop_s:.4f}")
    print(f"HOST_FRACTION={1.0 - model_s / loop_s:.4f}", flush=True)


if SHAPE == "generate":
    import torch
    from torch import nn

    torch.set_num_threads(1)
    VOCAB = 2000

    class RNNModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Embedding(VOCAB, 64)
            self.rnn = nn.LSTM(64, 64, 2)
            self.decoder = nn.Linear(64, VOCAB)

        def forward(self, x: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor]) -> object:
            out, hidden = self.rnn(self.encoder(x), hidden)
            return self.decoder(out), hidden

    model = RNNModel().eval()
    hidden = (torch.zeros(2, 1, 64), torch.zeros(2, 1, 64))
    inp = torch.randint(VOCAB, (1, 1), dtype=torch.long)
    out_file = io.StringIO()
    with torch.no_grad():
        t_start = perf()
        until = t_start + args.seconds
        while perf() < until:
            t0 = perf()
            output, hidden = model(inp, hidden)
            t1 = perf()
            # the host's work on the output, as generate.py does it (sampling, not input)
            word_weights = output.squeeze().div(0.5).exp().cpu()
            for _ in range(4):
                word_idx = torch.multinomial(word_weights, 1)[0]
            t2 = perf()
            inp.fill_(word_idx)
            t3 = perf()
            out_file.write(f"w{int(word_idx)} ")
            model_s += t1 - t0
            prep += t3 - t2
            steps += 1
        report(perf() - t_start)

elif SHAPE == "request":
    import torch
    from PIL import Image
    from torch import nn

    torch.set_num_threads(1)
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 9, 3, padding=1))
    model = nn.Sequential(model, nn.PixelShuffle(3)).eval()
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:300, 0:400]
    photo = (np.sin(xx / 9.0) + np.cos(yy / 13.0)) * 60 + 128 + rng.normal(0, 20, (300, 400))
    buf = io.BytesIO()
    Image.fromarray(np.clip(photo, 0, 255).astype(np.uint8)).save(buf, format="JPEG")
    t_start = perf()
    img = Image.open(io.BytesIO(buf.getvalue())).convert("L")
    x = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0)[None, None]
    t1 = perf()
    with torch.no_grad():
        y = model(x)
    t2 = perf()
    out = Image.fromarray((y[0, 0].clamp(0, 1).numpy() * 255).astype(np.uint8))
    until = perf() + args.seconds  # saving the result, repeated to be seen: the host's work
    while perf() < until:
        out.save(io.BytesIO(), format="PNG", compress_level=9)
    prep, model_s, steps = t1 - t_start, t2 - t1, 1
    report(perf() - t_start)

elif SHAPE == "keras-predict-loop":
    import keras

    CHARS, MAXLEN = 40, 20
    model = keras.Sequential(
        [keras.Input((MAXLEN, CHARS)), keras.layers.LSTM(32), keras.layers.Dense(CHARS)]
    )
    rng = np.random.default_rng(0)
    sentence = list(rng.integers(CHARS, size=MAXLEN))
    model.predict(np.zeros((1, MAXLEN, CHARS)), verbose=0)  # built and traced before the loop
    t_start = perf()
    until = t_start + args.seconds
    while perf() < until:
        t0 = perf()
        x_pred = np.zeros((1, MAXLEN, CHARS))
        for t, char in enumerate(sentence):
            x_pred[0, t, char] = 1.0
        t1 = perf()
        preds = model.predict(x_pred, verbose=0)[0]
        t2 = perf()
        p = np.exp(preds - preds.max())
        sentence = [*sentence[1:], int(rng.choice(CHARS, p=p / p.sum()))]
        prep += t1 - t0
        model_s += t2 - t1
        steps += 1
    report(perf() - t_start)

elif SHAPE == "persistent":
    import torch
    from torch.utils.data import DataLoader, Dataset

    torch.set_num_threads(1)

    class Slow(Dataset[torch.Tensor]):
        def __len__(self) -> int:
            return 32

        def __getitem__(self, i: int) -> torch.Tensor:
            time.sleep(0.008)  # a read: the workers wait, the loop waits for a batch
            return torch.full((64,), float(i))

    net = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 8))
    loader = DataLoader(Slow(), batch_size=8, num_workers=2, persistent_workers=True)
    for _ in loader:  # workers started before the measured epochs
        pass
    t_start = perf()
    until = t_start + args.seconds
    while perf() < until:
        it = iter(loader)
        while True:
            t0 = perf()
            batch = next(it, None)
            t1 = perf()
            prep += t1 - t0
            if batch is None:
                break
            x = batch.repeat(64, 1)
            for _ in range(20):
                net(x)
            model_s += perf() - t1
            steps += 1
    report(perf() - t_start)

else:
    sys.exit(f"corpus_shapes: unknown --shape {SHAPE!r}")
