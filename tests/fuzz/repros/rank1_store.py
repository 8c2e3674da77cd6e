"""Crash: pl.store of a tile into a rank-1 tensor fails in the numpy backend with a DeviceError
(found by nzjit.fuzz, flatten rank1_store). The whole-tensor flatten of NZ-31 yields a rank-1 ND
tensor, so its natural consumer (copy a window of the flat weight out) cannot run.

nzjit/backend/impl.py `_store` builds the partition as
`(1,) * (len(dst.shape) - 2) + (tile.valid_row, tile.valid_col)`, which is (1, L) for a rank-1
destination whose strides are (1,): GmView refuses the rank mismatch. A rank-1 destination needs
the partition (tile.valid_col,) (valid_row is 1).

    python tests/fuzz/repros/rank1_store.py              # DeviceError until fixed
"""

import numpy as np

import runtime
from nzjit import pl


@pl.kernel
def kernel(w: pl.Tensor[[32, 64], pl.INT8, pl.NZ], out: pl.Out[pl.Tensor[[512], pl.INT8]]):
    flat = pl.reshape(w, [32 * 64])  # NZ-31: kept, and the result is ND
    t = pl.load(flat, [256], [512], target_memory=pl.Mem.Vec)
    pl.store(t, [0], out)


def main() -> None:
    w = (np.arange(32 * 64) % 251 - 125).astype(np.int8).reshape(32, 64)
    packed = runtime.pack_nz(w)
    out = kernel(packed)
    assert np.array_equal(out, packed.reshape(-1)[256:768]), "wrong bytes"
    print("OK")


if __name__ == "__main__":
    main()
