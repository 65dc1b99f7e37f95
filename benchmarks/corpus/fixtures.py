"""Synthetic inputs the corpus scripts read from their working folder (no downloads).

Each fixture is built once under ``src/.fixtures/<name>`` and copied into a script's folder:

- ``wikitext-dir``: ``synthetic-wikitext/{train,valid,test}.txt`` for word_language_model
  (Zipf-distributed words over a 3000-word vocabulary; 150k/15k/15k tokens).
- ``wikitext2-file``: ``data/wikitext-2.txt`` for Lightning's ``WikiText2`` demo data set
  (it downloads only when the file is missing); 250k tokens.
- ``tiny-gpt2``: a 2-layer GPT-2 (64 wide) and a byte-level BPE tokenizer (1000 tokens)
  trained here on synthetic code, saved with ``save_pretrained``.
- ``tiny-roberta``: the same for a 2-layer RoBERTa (positions for 1024 tokens).
- ``keras-channels-first``: ``.keras/keras.json`` with ``image_data_format: channels_first``
  (for ``KERAS_HOME=.keras``).
- ``bsds300``: ``dataset/BSDS300/images/{train,test}``, 200 and 100 photo-like 481x321 JPEGs
  where super_resolution's ``download_bsd300`` looks (it downloads only when that folder is
  missing).
- ``photo``: ``photo.jpg``, one 1200x900 photo-like JPEG (an image to run inference on).
- ``imagenet-folder``: ``imagenet/{train,val}/<class>/*.jpg`` for ``ImageFolder``: 10 classes,
  8 training and 40 validation 500x375 JPEGs each.
- ``nietzsche``: ``nietzsche.txt``, ~120k characters of English-like lower-case prose made of
  a fixed word list (keras' character-level text generation downloads the real one).
The JPEGs are the SOFA case study's (``tests/workloads/sofa_case_common.synthetic_jpegs``).
"""

from __future__ import annotations

import random
import shutil
import sys
from collections.abc import Callable
from pathlib import Path


def _words(n_tokens: int, seed: int, vocab: int = 3000) -> str:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocab)]
    weights = [1.0 / (i + 1) for i in range(vocab)]
    lines, left = [], n_tokens
    while left > 0:
        k = min(left, rng.randint(8, 30))
        lines.append(" " + " ".join(rng.choices(words, weights, k=k)) + " . ")
        left -= k
    return "\n".join(lines) + "\n"


def _wikitext_dir(dest: Path) -> None:
    d = dest / "synthetic-wikitext"
    d.mkdir(parents=True)
    for name, n, seed in (("train", 150_000, 1), ("valid", 15_000, 2), ("test", 15_000, 3)):
        (d / f"{name}.txt").write_text(_words(n, seed))


def _wikitext2_file(dest: Path) -> None:
    (dest / "data").mkdir(parents=True)
    (dest / "data" / "wikitext-2.txt").write_text(_words(250_000, 4))


def _code_texts(n: int, seed: int) -> list[str]:
    shims = str(Path(__file__).resolve().parent / "shims")
    if shims not in sys.path:
        sys.path.insert(0, shims)
    import datasets  # the shim (shims/datasets)

    rows = datasets.load_dataset("synthetic", split="train")
    return [r["content"] for r in list(rows)[:n]] or [str(seed)]


def _tokenizer(specials: list[str], bos: str, eos: str, pad: str, unk: str) -> object:
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(_code_texts(400, 0), vocab_size=1000, special_tokens=specials)
    extra = {"mask_token": "<mask>"} if "<mask>" in specials else {}
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=bos, eos_token=eos, pad_token=pad, unk_token=unk, **extra
    )


def _tiny_gpt2(dest: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    d = dest / "tiny-gpt2"
    tok = _tokenizer(
        ["<|endoftext|>"], "<|endoftext|>", "<|endoftext|>", "<|endoftext|>", "<|endoftext|>"
    )
    cfg = GPT2Config(
        vocab_size=len(tok),  # type: ignore[arg-type]
        n_positions=256,
        n_embd=64,
        n_layer=2,
        n_head=2,
        bos_token_id=tok.bos_token_id,  # type: ignore[attr-defined]
        eos_token_id=tok.eos_token_id,  # type: ignore[attr-defined]
    )
    GPT2LMHeadModel(cfg).save_pretrained(d)
    tok.save_pretrained(d)  # type: ignore[attr-defined]


def _tiny_roberta(dest: Path) -> None:
    from transformers import RobertaConfig, RobertaModel

    d = dest / "tiny-roberta"
    tok = _tokenizer(["<s>", "<pad>", "</s>", "<unk>", "<mask>"], "<s>", "</s>", "<pad>", "<unk>")
    cfg = RobertaConfig(
        vocab_size=len(tok),  # type: ignore[arg-type]
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=1030,
        bos_token_id=0,
        pad_token_id=1,
        eos_token_id=2,
    )
    RobertaModel(cfg).save_pretrained(d)
    tok.save_pretrained(d)  # type: ignore[attr-defined]


def _keras_channels_first(dest: Path) -> None:
    d = dest / ".keras"
    d.mkdir(parents=True)
    (d / "keras.json").write_text(
        '{"backend": "torch", "image_data_format": "channels_first", "floatx": "float32", '
        '"epsilon": 1e-07}\n'
    )


def _jpegs(folder: Path, n: int, width: int, height: int) -> None:
    workloads = Path(__file__).resolve().parents[2] / "tests" / "workloads"
    if str(workloads) not in sys.path:
        sys.path.insert(0, str(workloads))
    from sofa_case_common import synthetic_jpegs

    synthetic_jpegs(folder, n, width, height)


def _bsds300(dest: Path) -> None:
    images = dest / "dataset" / "BSDS300" / "images"
    _jpegs(images / "train", 200, 481, 321)
    _jpegs(images / "test", 100, 481, 321)


def _photo(dest: Path) -> None:
    _jpegs(dest / ".photo", 1, 1200, 900)
    (dest / ".photo" / "img_00000.jpg").rename(dest / "photo.jpg")
    (dest / ".photo").rmdir()


def _imagenet_folder(dest: Path) -> None:
    for split, n in (("train", 8), ("val", 40)):
        for c in range(10):
            _jpegs(dest / "imagenet" / split / f"n{c:08d}", n, 500, 375)


_WORDS = " ".join(
    (
        "the of and to in that is it as for with not be this by his which but are have from or",
        "one all we man what will who their so if has been they more only when how must would",
        "there its can our life him no truth himself has every thing even those too such upon",
        "philosophers morality spirit nature good evil will power soul being world free strong",
        "always perhaps himself themselves whatever however something nothing belief reason",
    )
).split()


def _nietzsche(dest: Path) -> None:
    rng = random.Random(5)
    out, n = [], 0
    while n < 120_000:
        words = rng.choices(_WORDS, k=rng.randint(6, 24))
        sentence = " ".join(words).capitalize() + rng.choice([".", ".", ",", ";", "?", "!"])
        out.append(sentence)
        n += len(sentence) + 1
    (dest / "nietzsche.txt").write_text(" ".join(out) + "\n")


FIXTURES: dict[str, Callable[[Path], None]] = {
    "bsds300": _bsds300,
    "photo": _photo,
    "imagenet-folder": _imagenet_folder,
    "nietzsche": _nietzsche,
    "keras-channels-first": _keras_channels_first,
    "wikitext-dir": _wikitext_dir,
    "wikitext2-file": _wikitext2_file,
    "tiny-gpt2": _tiny_gpt2,
    "tiny-roberta": _tiny_roberta,
}


def install(name: str, cache: Path, dest: Path) -> None:
    """Build fixture ``name`` once under ``cache`` and copy it into ``dest``."""
    built = cache / name
    if not built.exists():
        tmp = cache / f".{name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        FIXTURES[name](tmp)
        tmp.rename(built)
    shutil.copytree(built, dest, dirs_exist_ok=True)
