"""Trains a small DCGAN-style generator built from tf_ops's transposed-convolution layers.

The data are generated: each 32x32 RGB image is a soft disc whose position, radius and colour
are given by a 6-number code. The decoder learns to draw the disc from its code (mean squared
error), with Keras's progress bar; afterwards it saves a PNG with the targets in the top row
and the decoder's drawings below them.

    python examples/train_decoder.py [--epochs 12] [--out decoder_samples.png]
"""
import argparse

import keras
import numpy as np
import tensorflow as tf

import tf_ops

SIZE = 32


def discs(codes):
    """Images [n, 32, 32, 3] in [0, 1] of the discs the codes [n, 6] describe:
    centre x, centre y, radius and colour, each in [0, 1]."""
    grid = (np.arange(SIZE) + 0.5) / SIZE
    cx, cy = 0.2 + 0.6 * codes[:, 0], 0.2 + 0.6 * codes[:, 1]
    radius = 0.1 + 0.15 * codes[:, 2]
    dist = np.sqrt((grid[None, None, :] - cx[:, None, None]) ** 2 +
                   (grid[None, :, None] - cy[:, None, None]) ** 2)
    inside = 1 / (1 + np.exp((dist - radius[:, None, None]) * 60))
    return (0.1 + 0.9 * inside[..., None] * codes[:, None, None, 3:6]).astype("float32")


def decoder():
    """Code [6] -> image [32, 32, 3], upsampling 4 -> 8 -> 16 -> 32 with transposed convolutions."""
    layers = tf_ops.layers
    return keras.Sequential([
        keras.Input((6,)),
        keras.layers.Dense(4 * 4 * 64, activation="relu"),
        keras.layers.Reshape((4, 4, 64)),
        layers.Conv2DTranspose(32, 4, strides=2, padding="same", activation="relu"),
        layers.Conv2DTranspose(16, 4, strides=2, padding="same", groups=2, activation="relu"),
        layers.DepthwiseConv2DTranspose(4, strides=2, padding="same", depth_multiplier=2),
        layers.Conv2D(16, 1, activation="relu"),
        layers.Conv2D(3, 3, padding="same", activation="sigmoid"),
    ], name="decoder")


def save_samples(path, targets, drawn, zoom=4):
    """Writes the targets (top row) above the decoder's drawings as one PNG, each pixel
    drawn as a zoom x zoom square."""
    rows = [np.concatenate(list(images), axis=1) for images in (targets, drawn)]
    grid = np.clip(np.concatenate(rows, axis=0), 0, 1).repeat(zoom, axis=0).repeat(zoom, axis=1)
    tf.io.write_file(path, tf.io.encode_png(tf.constant((grid * 255).round().astype("uint8"))))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--out", default="decoder_samples.png")
    args = parser.parse_args(argv)

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    codes = rng.uniform(size=(args.samples, 6)).astype("float32")
    images = discs(codes)
    model = decoder()
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="mse")
    history = model.fit(codes, images, batch_size=64, epochs=args.epochs, verbose=1)
    losses = history.history["loss"]
    print(f"loss: first epoch {losses[0]:.5f}, last epoch {losses[-1]:.5f}")

    test = rng.uniform(size=(8, 6)).astype("float32")
    save_samples(args.out, discs(test), model.predict(test, verbose=0))
    print(f"samples written to {args.out}")
    return losses


if __name__ == "__main__":
    main()
