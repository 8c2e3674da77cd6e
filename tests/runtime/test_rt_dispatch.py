"""check_args / ParamSpec / run_ranks (api.md: refused before dispatch, NZ-29)."""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest

from runtime import Cluster, DeviceError, DispatchError, Worker, pack_nz
from runtime.dispatch import ParamSpec, check_args, run_ranks

W_NZ = ParamSpec("w", ("B", 256, 512), np.int8, "NZ")
X = ParamSpec("x", ("B", 64, 512), np.int8)
OUT = ParamSpec("out", ("B", 64, 256), np.int32, is_output=True)


def test_bindings_from_numpy_arrays():
    b = check_args(
        [X, W_NZ, OUT],
        [
            np.zeros((3, 64, 512), np.int8),
            pack_nz(np.zeros((3, 256, 512), np.int8)),
            np.zeros((3, 64, 256), np.int32),
        ],
    )
    assert b == {"B": 3}


def test_mapping_arguments():
    args = {
        "x": np.zeros((2, 64, 512), np.int8),
        "w": pack_nz(np.zeros((2, 256, 512), np.int8)),
        "out": np.zeros((2, 64, 256), np.int32),
    }
    assert check_args([X, W_NZ, OUT], args) == {"B": 2}
    with pytest.raises(DispatchError, match="missing \\['out'\\]"):
        check_args([X, W_NZ, OUT], {"x": args["x"], "w": args["w"]})


def test_nz29_rank_message():
    with pytest.raises(DispatchError) as e:
        check_args([W_NZ], [np.zeros((256, 512), np.int8)])
    assert str(e.value) == (
        "parameter 'w' expects rank 3 [B, 256, 512] (NZ-29: a dynamic-batch NZ "
        "parameter takes a rank-3 argument), got rank 2 (256, 512)"
    )
    with pytest.raises(DispatchError, match="NZ-29"):
        check_args([W_NZ], [np.zeros((1, 2, 256, 512), np.int8)])  # rank 4 refused too


@pytest.mark.parametrize(
    "args,match",
    [
        ([np.zeros((3, 64, 512), np.int16)], "expects dtype int8, got int16"),
        ([np.zeros((3, 64, 256), np.int8)], "expects shape \\[B, 64, 512\\], got \\(3, 64, 256\\)"),
        ([np.zeros((3, 512, 64), np.int8).transpose(0, 2, 1)], "C-contiguous"),
        ([[1, 2, 3]], "expects a numpy array, DeviceTensor or StackedDeviceTensor, got list"),
        ([], "expects 1 arguments"),
    ],
)
def test_refusals_name_the_parameter(args, match):
    with pytest.raises(DispatchError, match=match) as e:
        check_args([X], args)
    assert "parameter 'x'" in str(e.value) or "x)" in str(e.value)


def test_dynamic_dim_consistency():
    with pytest.raises(DispatchError, match="dynamic dim 'B' = 3"):
        check_args([X, W_NZ], [np.zeros((3, 64, 512), np.int8), np.zeros((2, 256, 512), np.int8)])


def test_output_must_be_writable():
    out = np.zeros((1, 64, 256), np.int32)
    out.flags.writeable = False
    with pytest.raises(DispatchError, match="parameter 'out' is an output"):
        check_args([OUT], [out])


def test_nz_sub_byte_refused():
    spec = ParamSpec("q", (32, 32), ml_dtypes.int4, "NZ")
    with pytest.raises(DispatchError, match="NZ-33"):
        check_args([spec], [np.zeros((32, 32), ml_dtypes.int4)])


def test_device_and_stacked_arguments():
    w = Worker(0)
    t = w.alloc_tensor((2, 256, 512), np.int8, layout="NZ")
    assert check_args([W_NZ], [t], w) == {"B": 2}
    with pytest.raises(DispatchError, match="of worker 0, the call runs on worker 1"):
        check_args([W_NZ], [t], Worker(1))
    w.free_tensor(t)
    with pytest.raises(DispatchError, match="parameter 'w' got a freed DeviceTensor"):
        check_args([W_NZ], [t])
    c = Cluster(2)
    st = c.alloc_stacked_tensor(pack_nz(np.zeros((2, 256, 512), np.int8)))
    assert check_args([W_NZ], [st]) == {"B": 2}  # full_shape is the logical rank-3 argument
    rank4 = ParamSpec("w", (2, 1, 256, 512), np.int8, "NZ")
    with pytest.raises(DispatchError, match="expects rank 4"):
        check_args([rank4], [st])
    c.workers[1].free_tensor(st[1])
    with pytest.raises(DispatchError, match="shard 1 .* was freed"):
        check_args([W_NZ], [st])


def test_run_ranks_parallel_results():
    barrier = threading.Barrier(3, timeout=10)

    def job(r):
        barrier.wait()  # all three must be running at once
        return r * 10

    assert run_ranks({r: (lambda r=r: job(r)) for r in range(3)}) == {0: 0, 1: 10, 2: 20}
    assert run_ranks({5: lambda: "solo"}) == {5: "solo"}


def test_run_ranks_annotates_the_failing_rank():
    def boom():
        raise DispatchError("parameter 'x' expects dtype int8, got int16")

    with pytest.raises(DispatchError, match="^rank 2: parameter 'x'"):
        run_ranks({0: lambda: 0, 2: boom, 1: lambda: 1})
    with pytest.raises(DeviceError, match="^rank 0: bad"):
        run_ranks({0: lambda: (_ for _ in ()).throw(DeviceError("bad"))})
    with pytest.raises(ValueError, match="^rank 1: first"):
        run_ranks({3: lambda: int("x"), 1: lambda: (_ for _ in ()).throw(ValueError("first"))})
