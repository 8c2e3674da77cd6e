"""Row softmax on the vector unit, one SPMD lane per block of rows:

    y = exp(x - max_j x) / sum_j exp(x - max_j x)

The row maximum and sum are [R, 1] tiles (TROWMAX / TROWSUM), broadcast back along the rows
(TROWEXPANDSUB / TROWEXPANDDIV). A row whose real length is not a whole number of 32-byte blocks
is loaded with a valid_shape and padded with -inf (pl.tile.fillpad), which the max ignores and
exp turns into 0.

Tolerance: rtol 1e-6 against float64 numpy (the fp32 exp and the fp32 tree sum).

    python examples/row_softmax.py
"""

from __future__ import annotations

import numpy as np

from nzjit import pl

ROWS, COLS, BLOCK = 256, 1000, 16
PADDED = 1024  # whole 32-byte blocks of fp32


@pl.kernel
def row_softmax(x: pl.Tensor[[ROWS, PADDED], pl.FP32], y: pl.Out[pl.Tensor[[ROWS, PADDED], pl.FP32]]):
    for lane in pl.spmd(ROWS // BLOCK):
        t = pl.load(x, [lane * BLOCK, 0], [BLOCK, PADDED], valid_shape=[BLOCK, COLS])
        t = pl.tile.fillpad(t, pad_value=pl.PadValue.min)
        e = pl.exp(pl.row_expand_sub(t, pl.row_max(t)))
        pl.store(pl.row_expand_div(e, pl.row_sum(e)), [lane * BLOCK, 0], y)


def reference(x: np.ndarray) -> np.ndarray:
    """float64 numpy softmax over the first COLS columns."""
    v = x[:, :COLS].astype(np.float64)
    e = np.exp(v - v.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> None:
    x = np.random.default_rng(1).standard_normal((ROWS, PADDED)).astype(np.float32)
    y = row_softmax(x)
    np.testing.assert_allclose(y[:, :COLS], reference(x), rtol=1e-6, atol=1e-9)
    assert (y[:, COLS:] == 0).all()
    print(f"row softmax {ROWS}x{COLS} (padded to {PADDED}, {ROWS // BLOCK} lanes): within rtol 1e-6 of numpy")


if __name__ == "__main__":
    main()
