"""Runtime bad input, as a matrix (issue 10): every malformed argument of a call is refused with
`runtime.DispatchError` before anything runs, and the caller's outputs (host arrays, resident
DeviceTensors, stacked tensors) are byte-identical afterwards.

Kinds of argument x defects: wrong rank (incl. NZ-29), shape, dtype, memory layout (Fortran /
strided views), read-only or non-contiguous outputs, non-arrays, bad scalars, argument counts,
freed DeviceTensors, DeviceTensors of another worker, malformed or mismatched stacked shards.

Not refusable: whether the bytes of an NZ argument are really in NZ order. A numpy array or a
DeviceTensor carries no byte-order tag (NZ-1: the annotation is the caller's statement), see
test_nz_byte_order_is_the_callers_statement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest

import runtime
from nzjit import pl
from runtime import DispatchError

B = pl.dynamic("B")
LAYERS, T, N, K = 3, 16, 32, 64


@pl.kernel
def nz_layer(
    x: pl.Tensor[[T, K], pl.FP16],
    w: pl.Tensor[[B, N, K], pl.FP16, pl.NZ],
    layer: pl.Scalar[pl.INDEX],
    out: pl.Out[pl.Tensor[[T, N], pl.FP32]],
    onz: pl.Out[pl.Tensor[[T, N], pl.FP32, pl.NZ]],
):
    """x @ w[layer]^T twice: tensor-level into an ND output, tile-level into an FP32 NZ output."""
    out[:, :] = pl.matmul(x, w[layer], b_trans=True)
    xt = pl.load(x, [0, 0], [T, K], target_memory=pl.Mem.Mat)
    wt = pl.load(w[layer], [0, 0], [N, K], target_memory=pl.Mem.Mat)
    pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], onz)


@pl.kernel
def shared_batch(
    x: pl.Tensor[[B, T, K], pl.FP16],
    w: pl.Tensor[[B, N, K], pl.FP16, pl.NZ],
    out: pl.Out[pl.Tensor[[T, N], pl.FP32]],
):
    out[:, :] = pl.matmul(x[0], w[0], b_trans=True)


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.integers(-4, 5, (T, K)).astype(np.float16),
        rng.integers(-4, 5, (LAYERS, N, K)).astype(np.float16),
    )


def _reference(x: np.ndarray, w: np.ndarray, layer: int) -> np.ndarray:
    return x.astype(np.float32) @ w[layer].astype(np.float32).T


def _strided(a: np.ndarray) -> np.ndarray:
    """The same values as a non-contiguous view (every other column of a wider array)."""
    wide = np.zeros((*a.shape[:-1], 2 * a.shape[-1]), a.dtype)
    wide[..., ::2] = a
    return wide[..., ::2]


def _readonly(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


# ------------------------------------------------------------------------- host (numpy) arguments
def _host_args() -> dict[str, object]:
    x, w = _data()
    fill = np.arange(T * N, dtype=np.float32).reshape(T, N) - 7.0  # not what the kernel would write
    return {"x": x, "w": runtime.pack_nz(w), "layer": 1, "out": fill.copy(), "onz": runtime.pack_nz(fill)}


HostCase = Callable[[dict[str, object]], None]

HOST_CASES: dict[str, HostCase] = {
    # rank
    "x rank 3": lambda a: a.update(x=a["x"][None]),
    "w rank 2 (NZ-29)": lambda a: a.update(w=a["w"][0]),
    "w rank 4 (NZ-29)": lambda a: a.update(w=a["w"][None]),
    "out rank 3": lambda a: a.update(out=a["out"][None].copy()),
    "onz rank 1": lambda a: a.update(onz=a["onz"].reshape(-1).copy()),
    # shape
    "x shape": lambda a: a.update(x=np.zeros((T, K // 2), np.float16)),
    "w shape": lambda a: a.update(w=np.zeros((LAYERS, N, K // 2), np.float16)),
    "out shape": lambda a: a.update(out=np.zeros((T, N // 2), np.float32)),
    "onz shape": lambda a: a.update(onz=np.zeros((2 * T, N), np.float32)),
    # dtype
    "x dtype": lambda a: a.update(x=a["x"].astype(np.float32)),
    "w dtype": lambda a: a.update(w=a["w"].astype(np.int16)),
    "w bf16 for fp16": lambda a: a.update(w=a["w"].astype(ml_dtypes.bfloat16)),
    "out dtype": lambda a: a.update(out=a["out"].astype(np.float16)),
    "onz dtype": lambda a: a.update(onz=a["onz"].astype(np.int32)),
    # memory layout and writability
    "x Fortran order": lambda a: a.update(x=np.asfortranarray(a["x"])),
    "x strided view": lambda a: a.update(x=_strided(a["x"])),
    "w strided view": lambda a: a.update(w=_strided(a["w"])),
    "out strided view": lambda a: a.update(out=_strided(a["out"])),
    "onz Fortran order": lambda a: a.update(onz=np.asfortranarray(a["onz"])),
    "out read-only": lambda a: a.update(out=_readonly(a["out"])),
    "onz read-only": lambda a: a.update(onz=_readonly(a["onz"])),
    # not arrays, bad scalars
    "x list": lambda a: a.update(x=a["x"].tolist()),
    "w None": lambda a: a.update(w=None),
    "layer float": lambda a: a.update(layer=1.0),
    "layer bool": lambda a: a.update(layer=True),
    "layer array": lambda a: a.update(layer=np.array([1])),
}


@pytest.mark.parametrize("case", list(HOST_CASES))
def test_host_argument_refused_before_any_write(case):
    args = _host_args()
    HOST_CASES[case](args)
    outs = {k: args[k] for k in ("out", "onz") if isinstance(args[k], np.ndarray)}
    before = {k: v.tobytes() for k, v in outs.items()}
    inputs = {k: np.array(args[k], copy=True) for k in ("x", "w") if isinstance(args[k], np.ndarray)}
    with pytest.raises(DispatchError):
        nz_layer(*args.values())
    assert {k: v.tobytes() for k, v in outs.items()} == before
    for k, v in inputs.items():
        assert np.array_equal(np.asarray(args[k]), v)


@pytest.mark.parametrize("n", [0, 1, 2, 4, 6])  # 3: Out omitted, 5: all given
def test_argument_count_refused(n):
    args = list(_host_args().values())
    given = (args + args)[:n]
    outs = [a for a in given if isinstance(a, np.ndarray)]
    before = [a.tobytes() for a in outs]
    with pytest.raises(DispatchError):
        nz_layer(*given)
    assert [a.tobytes() for a in outs] == before


def test_dynamic_dim_bound_twice_differently_refused():
    x = np.zeros((2, T, K), np.float16)
    w = np.zeros((3, N, K), np.float16)
    out = np.full((T, N), 3.0, np.float32)
    with pytest.raises(DispatchError, match="dynamic dim 'B'"):
        shared_batch(x, w, out)
    assert (out == 3.0).all()


def test_host_control_runs_and_is_exact():
    """The unmutated arguments run, so every refusal above is caused by its one defect."""
    args = _host_args()
    nz_layer(*args.values())
    x, w = _data()
    ref = _reference(x, w, 1)
    assert np.array_equal(args["out"], ref)
    assert np.array_equal(runtime.unpack_nz(args["onz"]), ref)


def test_readonly_input_is_accepted():
    args = _host_args()
    args["x"], args["w"] = _readonly(args["x"]), _readonly(args["w"])
    nz_layer(*args.values())
    x, w = _data()
    assert np.array_equal(args["out"], _reference(x, w, 1))


# ------------------------------------------------------------------------------- DeviceTensors
@dataclass
class Device:
    worker: runtime.Worker
    other: runtime.Worker
    args: dict[str, object]
    fill: np.ndarray


def _device() -> Device:
    wk, other = runtime.Worker(0), runtime.Worker(1)
    x, w = _data()
    fill = np.arange(T * N, dtype=np.float32).reshape(T, N) - 7.0
    args = {
        "x": wk.alloc_tensor((T, K), np.float16, init=x),
        "w": wk.alloc_tensor((LAYERS, N, K), np.float16, init=runtime.pack_nz(w)),
        "layer": 2,
        "out": wk.alloc_tensor((T, N), np.float32, init=fill),
        "onz": wk.alloc_tensor((T, N), np.float32, init=runtime.pack_nz(fill)),
    }
    return Device(wk, other, args, fill)


def _freed(d: Device, name: str) -> None:
    t = d.args[name]
    assert isinstance(t, runtime.DeviceTensor)
    copy = d.worker.alloc_tensor(t.shape, t.dtype, init=d.worker.copy_from(t))
    d.worker.free_tensor(copy)
    d.args[name] = copy


def _elsewhere(d: Device, name: str) -> None:
    t = d.args[name]
    assert isinstance(t, runtime.DeviceTensor)
    d.args[name] = d.other.alloc_tensor(t.shape, t.dtype, init=d.worker.copy_from(t))


def _wrong(shape: tuple[int, ...] | None = None, dtype: object = None) -> Callable[[Device, str], None]:
    def mutate(d: Device, name: str) -> None:
        t = d.args[name]
        assert isinstance(t, runtime.DeviceTensor)
        d.args[name] = d.worker.alloc_tensor(shape or t.shape, dtype or t.dtype)

    return mutate


DEVICE_CASES: dict[str, tuple[str, Callable[[Device, str], None]]] = {
    "freed x": ("x", _freed),
    "freed w": ("w", _freed),
    "freed out": ("out", _freed),
    "freed onz": ("onz", _freed),
    "x on another worker": ("x", _elsewhere),
    "w on another worker": ("w", _elsewhere),
    "out on another worker": ("out", _elsewhere),
    "onz on another worker": ("onz", _elsewhere),
    "w device rank 2 (NZ-29)": ("w", _wrong((N, K))),
    "w device rank 4 (NZ-29)": ("w", _wrong((1, LAYERS, N, K))),
    "x device shape": ("x", _wrong((T, 2 * K))),
    "out device dtype": ("out", _wrong(dtype=np.float16)),
    "onz device dtype": ("onz", _wrong(dtype=np.int32)),
}


def _device_bytes(d: Device) -> dict[str, bytes]:
    out = {}
    for name in ("out", "onz"):
        t = d.args[name]
        if isinstance(t, runtime.DeviceTensor) and not t.freed:
            out[name] = t.worker.copy_from(t).tobytes()
    out["fill"] = d.fill.tobytes()
    return out


@pytest.mark.parametrize("case", list(DEVICE_CASES))
def test_device_argument_refused_before_any_write(case):
    d = _device()
    original = _device_bytes(d)  # the resident outputs before one argument is swapped for a bad one
    originals = {k: d.args[k] for k in ("out", "onz")}
    name, mutate = DEVICE_CASES[case]
    mutate(d, name)
    before = _device_bytes(d)
    with pytest.raises(DispatchError):
        nz_layer(*d.args.values())
    assert _device_bytes(d) == before
    d.args.update(originals)
    assert _device_bytes(d) == original


def test_device_control_runs_and_is_exact():
    d = _device()
    nz_layer(*d.args.values())
    x, w = _data()
    ref = _reference(x, w, 2)
    out, onz = d.args["out"], d.args["onz"]
    assert isinstance(out, runtime.DeviceTensor) and isinstance(onz, runtime.DeviceTensor)
    assert np.array_equal(d.worker.copy_from(out), ref)
    assert np.array_equal(runtime.unpack_nz(d.worker.copy_from(onz)), ref)


# ------------------------------------------------------------------------ stacked (multi-rank)
RANKS = 2


@pl.orchestration
def two_ranks(
    x: pl.Tensor[[RANKS, T, K], pl.FP16],
    w: pl.Tensor[[RANKS, LAYERS, N, K], pl.FP16, pl.NZ],
    out: pl.Out[pl.Tensor[[RANKS, T, N], pl.FP32]],
    onz: pl.Out[pl.Tensor[[RANKS, T, N], pl.FP32, pl.NZ]],
):
    for r in range(RANKS):
        nz_layer(x[r], w[r], r, out[r], onz[r], device=r)


def _stacked(cluster: runtime.Cluster) -> dict[str, object]:
    rng = np.random.default_rng(3)
    x = rng.integers(-4, 5, (RANKS, T, K)).astype(np.float16)
    w = rng.integers(-4, 5, (RANKS, LAYERS, N, K)).astype(np.float16)
    fill = np.arange(RANKS * T * N, dtype=np.float32).reshape(RANKS, T, N) - 9.0
    return {
        "x": cluster.alloc_stacked_tensor(x),
        "w": cluster.alloc_stacked_tensor(runtime.pack_nz(w)),
        "out": cluster.alloc_stacked_tensor(fill),
        "onz": cluster.alloc_stacked_tensor(runtime.pack_nz(fill)),
        "_x": x,
        "_w": w,
    }


def _stacked_bytes(cluster: runtime.Cluster, a: dict[str, object]) -> list[bytes]:
    return [cluster.copy_stacked_from(a[k]).tobytes() for k in ("out", "onz")]  # type: ignore[arg-type]


def test_stacked_control_runs_and_is_exact():
    cluster = runtime.Cluster(RANKS)
    a = _stacked(cluster)
    two_ranks(a["x"], a["w"], a["out"], a["onz"])
    x, w = a["_x"], a["_w"]
    out = cluster.copy_stacked_from(a["out"])
    onz = runtime.unpack_nz(cluster.copy_stacked_from(a["onz"]))
    for r in range(RANKS):
        ref = _reference(x[r], w[r], r)  # type: ignore[index]
        assert np.array_equal(out[r], ref) and np.array_equal(onz[r], ref)


@pytest.mark.parametrize(
    "defect", ["shard shape", "shard dtype", "worker ids", "freed shard", "shard count", "not a DeviceTensor"]
)
def test_malformed_stacked_tensor_refused_at_construction(defect):
    cluster = runtime.Cluster(RANKS)
    a = _stacked(cluster)
    x = a["x"]
    assert isinstance(x, runtime.StackedDeviceTensor)
    shards, full, ids = list(x.shards), x.full_shape, list(x.worker_ids)
    w1 = cluster.workers[1]
    if defect == "shard shape":
        shards[1] = w1.alloc_tensor((T, K // 2), np.float16)
    elif defect == "shard dtype":
        shards[1] = w1.alloc_tensor((T, K), np.float32)
    elif defect == "worker ids":
        ids = [0, 0]
    elif defect == "freed shard":
        shards[1] = w1.alloc_tensor((T, K), np.float16)
        w1.free_tensor(shards[1])
    elif defect == "shard count":
        shards = shards[:1]
    else:
        shards[1] = np.zeros((T, K), np.float16)  # type: ignore[call-overload]
    before = _stacked_bytes(cluster, a)
    with pytest.raises(DispatchError):
        runtime.StackedDeviceTensor(shards, full, ids)
    assert _stacked_bytes(cluster, a) == before


@pytest.mark.parametrize(
    "defect",
    [
        "shard freed after construction",
        "x from another cluster",
        "out from another cluster",
        "x with too few ranks",
        "w shards of the wrong shape",
        "stacked x passed to a kernel directly",
    ],
)
def test_mismatched_stacked_arguments_refused_before_any_write(defect):
    cluster = runtime.Cluster(RANKS)
    a = _stacked(cluster)
    args = [a["x"], a["w"], a["out"], a["onz"]]
    if defect == "shard freed after construction":
        x = a["x"]
        assert isinstance(x, runtime.StackedDeviceTensor)
        x.shards[1].worker.free_tensor(x.shards[1])
    elif defect in ("x from another cluster", "out from another cluster"):
        i = 0 if defect.startswith("x") else 2
        other = runtime.Cluster(RANKS)
        args[i] = other.alloc_stacked_tensor(cluster.copy_stacked_from(args[i]))  # type: ignore[arg-type]
    elif defect == "x with too few ranks":
        one = runtime.Cluster(1)
        args[0] = one.alloc_stacked_tensor(np.zeros((1, T, K), np.float16))
    elif defect == "w shards of the wrong shape":
        args[1] = cluster.alloc_stacked_tensor(np.zeros((RANKS, LAYERS, N, K // 2), np.float16))
    before = _stacked_bytes(cluster, a)
    with pytest.raises(DispatchError):
        if defect == "stacked x passed to a kernel directly":
            nz_layer(
                a["x"],
                runtime.pack_nz(a["_w"][0]),
                0,
                np.zeros((T, N), np.float32),  # type: ignore[index]
                np.zeros((T, N), np.float32),
            )
        else:
            two_ranks(*args)
    assert _stacked_bytes(cluster, a) == before


# ------------------------------------------------------------------------------ known gaps
def test_nz_byte_order_is_the_callers_statement():
    """An NZ argument must say its bytes are NZ (pack_nz / as_nz): a logical (unpacked) array is
    refused, outputs untouched; as_nz runs on exactly the bytes given (NZ-1: the annotation
    never converts bytes)."""
    args = _host_args()
    x, w = _data()
    args["w"] = w  # logical order, not pack_nz(w)
    before = args["out"].tobytes()  # type: ignore[union-attr]
    with pytest.raises(DispatchError, match=r"parameter 'w' is NZ .*pack_nz.*as_nz"):
        nz_layer(*args.values())
    assert args["out"].tobytes() == before  # type: ignore[union-attr]
    args["w"] = runtime.as_nz(w)  # the caller's statement: these bytes are NZ
    nz_layer(*args.values())
    assert np.array_equal(args["out"], _reference(x, runtime.unpack_nz(w), 1))


@pytest.mark.parametrize("layer", [-1, LAYERS, LAYERS + 2])
def test_out_of_range_runtime_index_refused(layer):
    args = _host_args()
    args["layer"] = layer
    before = args["out"].tobytes()  # type: ignore[union-attr]
    try:
        nz_layer(*args.values())
    except DispatchError:
        assert args["out"].tobytes() == before  # type: ignore[union-attr]
        return
    raise AssertionError(f"layer={layer} of {LAYERS} ran instead of being refused")
