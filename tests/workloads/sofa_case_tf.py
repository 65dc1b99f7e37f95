"""SOFA case study, TensorFlow: inference over JPEG files with one of four preprocessing methods.

Usage: ``python sofa_case_tf.py --model alexnet|vgg11|googlenet --method
loop|serial|parallel|compiled [--images DIR|N] [--seconds S]`` (see ``sofa_case_common.py``
for the methods and the measure; the last stdout line is the result JSON).

Per file: ``tf.io.read_file`` -> ``tf.io.decode_jpeg`` -> ``tf.image.resize`` to SIZE x SIZE ->
``tf.image.per_image_standardization``; then the Keras model (built here, random weights,
NHWC) called as ``model(x, training=False)`` and the predictions read back with ``.numpy()``.

- ``loop``: that function called eagerly per file in the loop body, then ``tf.stack``;
- ``serial``: ``Dataset.from_tensor_slices(files).map(load).batch(B)``, with tf.data's own
  rewrites that would make it run ahead of the loop (``map_parallelization``,
  ``inject_prefetch``, and ``map_and_batch_fusion``, whose fused op keeps a batch or two in
  flight on its own thread) switched off, so that it is the serial pipeline of the ladder, not
  TF's default;
- ``parallel``: ``map(load, num_parallel_calls=AUTOTUNE).batch(B).prefetch(AUTOTUNE)``;
- ``compiled``: ``parallel`` with ``tf.function(model, jit_compile=True)`` (XLA).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sofa_case_common import CLASSES, fail, image_files, measure, parse_args


def build_model(name: str, size: int) -> Any:
    """The small AlexNet-, VGG11- or GoogLeNet-shaped CNN (same layers as the torch twin)."""
    import keras
    from keras import layers

    def conv(x: Any, c: int, k: int, s: int = 1) -> Any:
        return layers.Conv2D(c, k, strides=s, padding="same", activation="relu")(x)

    inp = keras.Input((size, size, 3))
    if name == "alexnet":
        x = conv(inp, 32, 5, 2)
        x = layers.MaxPooling2D(3, 2)(x)
        x = conv(x, 64, 5)
        x = layers.MaxPooling2D(3, 2)(x)
        x = conv(conv(conv(x, 96, 3), 96, 3), 64, 3)
        x = layers.MaxPooling2D(3, 2)(x)
        x = layers.Flatten()(x)
        x = layers.Dense(256, activation="relu")(x)
        x = layers.Dense(256, activation="relu")(x)
    elif name == "vgg11":
        x = inp
        for c in (16, "M", 32, "M", 64, 64, "M", 128, 128, "M", 128, 128, "M"):
            x = layers.MaxPooling2D(2, 2)(x) if c == "M" else conv(x, int(c), 3)
        x = layers.Flatten()(x)
        x = layers.Dense(256, activation="relu")(x)
        x = layers.Dense(256, activation="relu")(x)
    else:

        def inception(x: Any, c1: int, c3r: int, c3: int, c5r: int, c5: int, cp: int) -> Any:
            b1 = conv(x, c1, 1)
            b2 = conv(conv(x, c3r, 1), c3, 3)
            b3 = conv(conv(x, c5r, 1), c5, 3)
            b4 = conv(layers.MaxPooling2D(3, 1, padding="same")(x), cp, 1)
            return layers.Concatenate()([b1, b2, b3, b4])

        x = conv(inp, 32, 7, 2)
        x = layers.MaxPooling2D(3, 2, padding="same")(x)
        x = conv(conv(x, 32, 1), 96, 3)
        x = layers.MaxPooling2D(3, 2, padding="same")(x)
        x = inception(x, 32, 48, 64, 8, 16, 16)
        x = inception(x, 64, 64, 96, 16, 48, 32)
        x = layers.MaxPooling2D(3, 2, padding="same")(x)
        x = inception(x, 96, 48, 104, 8, 24, 32)
        x = inception(x, 80, 56, 112, 12, 32, 32)
        x = layers.GlobalAveragePooling2D()(x)
    out = layers.Dense(CLASSES)(x)
    return keras.Model(inp, out, name=name)


def main() -> int:
    a = parse_args("tf")
    import tensorflow as tf

    if a.threads:
        tf.config.threading.set_intra_op_parallelism_threads(a.threads)
        tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    if a.device == "cuda" and not tf.config.list_physical_devices("GPU"):
        fail("--device cuda: this TensorFlow sees no GPU (tensorflow-cpu, or no CUDA device)")
    with image_files(a.images) as files:
        device = "/GPU:0" if a.device == "cuda" else "/CPU:0"
        size = a.size

        def load(path: Any) -> Any:
            img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
            img = tf.image.resize(img, (size, size))
            return tf.image.per_image_standardization(img)

        with tf.device(device):
            model = build_model(a.model, size)
        call = tf.function(model, jit_compile=True) if a.method == "compiled" else model

        def predict(x: Any) -> object:
            with tf.device(device):
                return tf.argmax(call(x, training=False), axis=1).numpy()

        names = [str(p) for p in files]
        if a.method == "loop":
            pos = 0

            def get_batch() -> Any:
                nonlocal pos
                images = []
                for _ in range(a.batch):
                    images.append(load(names[pos % len(names)]))
                    pos += 1
                return tf.stack(images)
        else:
            ds = tf.data.Dataset.from_tensor_slices(names).repeat()
            if a.method == "serial":
                ds = ds.map(load).batch(a.batch, drop_remainder=True)
                opts = tf.data.Options()
                opts.experimental_optimization.map_parallelization = False
                opts.experimental_optimization.inject_prefetch = False
                opts.experimental_optimization.map_and_batch_fusion = False
                ds = ds.with_options(opts)
            else:
                ds = ds.map(load, num_parallel_calls=tf.data.AUTOTUNE)
                ds = ds.batch(a.batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
            it = iter(ds)

            def get_batch() -> Any:
                return next(it)

        measure(
            a,
            "tf",
            get_batch,
            predict,
            files=len(files),
            params=int(model.count_params()),
            workers=None,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
