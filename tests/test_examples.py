"""The example under examples/ runs as the README says: the decoder built from tf_ops layers
trains (its loss falls, shown by Keras's progress bar) and its samples are written as a PNG."""
import pathlib
import re
import subprocess
import sys
import tempfile

import tensorflow as tf

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


class ExampleTest(tf.test.TestCase):

    def test_train_decoder(self):
        with tempfile.TemporaryDirectory() as tmp:
            png = pathlib.Path(tmp) / "samples.png"
            run = subprocess.run([sys.executable, str(EXAMPLES / "train_decoder.py"), "--epochs", "3",
                                  "--samples", "512", "--out", str(png)],
                                 cwd=tmp, capture_output=True, text=True, timeout=600)
            self.assertEqual(run.returncode, 0, run.stderr[-3000:])
            self.assertIn("Epoch 3/3", run.stdout)
            first, last = (float(v) for v in re.search(
                r"loss: first epoch ([\d.]+), last epoch ([\d.]+)", run.stdout).groups())
            self.assertLess(last, 0.8 * first)
            image = tf.io.decode_png(tf.io.read_file(str(png)))
            self.assertEqual(image.shape, (2 * 32 * 4, 8 * 32 * 4, 3))
            self.assertGreater(int(tf.reduce_max(image)) - int(tf.reduce_min(image)), 100)


if __name__ == "__main__":
    tf.test.main()
