"""Prints how far our all-MiniLM-L6-v2 is from the reference implementation.

The reference outputs (Hugging Face transformers on PyTorch, 5 real sentences)
are committed in tests/fixtures/parity/minilm/ by tests/make_parity_fixtures.py.

    python -m model.convert --from hf MINILM_DIR --to keras runs/minilm
    python tests/minilm_parity.py runs/minilm
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import model  # noqa: E402

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "parity", "minilm")


def main(path: str) -> None:
    m = model.load(path)
    with np.load(os.path.join(FIXTURE, "inputs.npz")) as f:
        inputs = dict(f)
    with np.load(os.path.join(FIXTURE, "expected.npz")) as f:
        expected = f["sequence_output"]
    got = np.asarray(m(inputs)["sequence_output"])
    diff = np.abs(got - expected)
    real = inputs["padding_mask"].astype(bool)
    print(f"sentences: {len(real)}, real tokens: {int(real.sum())}, hidden {got.shape[-1]}")
    print(f"max |ours - reference| on real tokens: {diff[real].max():.2e}")
    print(f"max |ours - reference| on all positions (padding too): {diff.max():.2e}")


if __name__ == "__main__":
    main(sys.argv[1])
