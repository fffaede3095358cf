"""Write scikit-learn's handwritten digits as an image folder, to try the ``folder`` benchmark on
real images before your own: ``python examples/digits_as_images.py my_images`` writes
``my_images/train/<digit>/*.png`` and ``my_images/test/<digit>/*.png`` (8x8 greyscale PNGs, 1797
images in 10 class folders, a fifth of each class held out as the test set, the split of
``seq-digits``), then

    uv run xder-run train --benchmark folder --data-root my_images --protocol laptop

trains X-DER on them in 5 tasks of 2 digits (the folder benchmark's 2 classes a task).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image
from sklearn.datasets import load_digits

from xder_data.digits import digits_split


def write_digits(out: Path) -> int:
    """Write the digits under ``out``; returns the number of images written."""
    digits = load_digits()
    # Grey levels 0-16 -> 0-255, as seq-digits reads them; its train/test split.
    images = np.rint(digits.images * (255 / 16)).astype(np.uint8)
    train_rows, test_rows = digits_split(digits.target)
    for split, rows in (("train", train_rows), ("test", test_rows)):
        for i in rows:
            image, label = images[i], digits.target[i]
            folder = out / split / str(label)
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image, mode="L").save(folder / f"{i:04d}.png")
    return len(images)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder to write (e.g. my_images)")
    args = parser.parse_args()
    count = write_digits(args.out)
    print(f"{count} images in {args.out}/train and {args.out}/test")


if __name__ == "__main__":
    main()
