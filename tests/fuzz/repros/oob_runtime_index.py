"""Silently wrong: a runtime leading-axis index (`w[layer]`, layer a kernel scalar) is neither
range-checked at dispatch nor refused at compile time (found by nzjit.fuzz, tile_mm lead:scalar
runtime_oob_layer; also test_bad_inputs.py::test_out_of_range_runtime_index_refused).

layer == LAYERS addresses the 2048 bytes right after w: here exactly the GM allocation of the
next argument x, so the kernel returns x @ (x's bytes read as an NZ layer)^T without any error. layer == -1 faults (DeviceError from
the backend's negative-offset guard), a larger layer faults outside every allocation. numpy has
no value for w[LAYERS]; the call must be refused (DispatchError) before it runs.

    python tests/fuzz/repros/oob_runtime_index.py       # AssertionError until fixed
"""

import numpy as np

import runtime
from nzjit import pl

LAYERS = 2


@pl.kernel
def kernel(
    w: pl.Tensor[[LAYERS, 32, 64], pl.INT8, pl.NZ],
    x: pl.Tensor[[32, 64], pl.INT8],
    layer: pl.Scalar[pl.INDEX],
    out: pl.Out[pl.Tensor[[32, 32], pl.INT32]],
):
    out[:, :] = pl.matmul(x, w[layer], b_trans=True)


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(-8, 8, (32, 64)).astype(np.int8)
    w = rng.integers(-8, 8, (LAYERS, 32, 64)).astype(np.int8)
    try:
        out = kernel(runtime.pack_nz(w), x, LAYERS)
    except runtime.DispatchError as e:
        print(f"refused: {e}")
        return
    ghost = x.astype(np.int32) @ runtime.unpack_nz(x).astype(np.int32).T
    what = "x @ unpack_nz(x)^T: x's bytes were read as layer 2" if np.array_equal(out, ghost) else "garbage"
    raise AssertionError(
        f"w[{LAYERS}] of a {LAYERS}-layer weight ran and returned {what} instead of being refused"
    )


if __name__ == "__main__":
    main()
