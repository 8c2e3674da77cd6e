"""runtime.vector_prep: a prepared vector instruction gives the bytes of the instruction call (every
byte of the destination image, inside and outside its valid region) on random data, for every
prepared family, fp32 / fp16 / bf16 / int where the op allows, whole and partial valid shapes; and
a refusal is the instruction's own DeviceError, raised by `prepare` (nothing written)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from runtime import DeviceError, TileBuf
from runtime import vector as V
from runtime.tile import tile_geometry
from runtime.vector_prep import PREPARED, prepare

F32, F16, BF16 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
I32, I16, I8 = np.dtype(np.int32), np.dtype(np.int16), np.dtype(np.int8)
RNG = np.random.default_rng(1210)
SHAPES = ((16, 64, 16, 64), (16, 64, 11, 37), (32, 32, 32, 9))  # rows, cols, valid rows, valid cols


def _image(dt: np.dtype, rows: int, cols: int) -> np.ndarray:
    """Random element values of `dt` as a uint8 image (small ints; floats with a spread of sizes
    and signs, some zeros)."""
    if dt.kind in "iu":
        v = RNG.integers(-50, 50, rows * cols).astype(dt)
    else:
        v = (RNG.standard_normal(rows * cols) * 4.0).astype(np.float32)
        v[RNG.random(v.size) < 0.05] = 0.0
        v = v.astype(dt)
    return v.view(np.uint8).copy()


def _spec(dt, rows, cols, vr=None, vc=None, layout=None):
    return (tile_geometry("Vec", dt, rows, cols, layout), vr, vc)


def _same(name, call, dst, srcs, params, extra=(), target="A2A3"):
    """The instruction call (`call` on TileBufs) and the prepared form on copies of the same bytes."""
    imgs = [None if s is None else _image(s[0].dtype, s[0].rows, s[0].cols) for s in srcs]
    d0 = _image(dst[0].dtype, dst[0].rows, dst[0].cols)
    d1 = d0.copy()
    tiles = [
        None if s is None else TileBuf.from_geometry(*s, i.copy()) for s, i in zip(srcs, imgs, strict=True)
    ]
    try:
        call(TileBuf.from_geometry(*dst, d0), *tiles)
    except DeviceError as err:  # e.g. TCVT's round mode 'odd' to an int: prepare refuses alike
        assert _refusal(lambda: prepare(name, dst, *srcs, target=target, **params)) == str(err)
        return
    p = prepare(name, dst, *srcs, target=target, **params)
    p(d1, *(i for i in imgs if i is not None), *extra)
    assert d1.tobytes() == d0.tobytes()


ALU = {"A2A3": (F32, F16, I32, I16), "A5": (F32, F16, BF16, I32, I16, I8)}


@pytest.mark.parametrize("target", ["A2A3", "A5"])
@pytest.mark.parametrize("op", list(V.BINARY_OPS))
@pytest.mark.parametrize("shape", SHAPES)
def test_binary_and_scalar_prepared_equal_the_call(target, op, shape):
    rows, cols, vr, vc = shape
    for dt in ALU[target]:
        if op == "div" and dt.kind in "iu":
            continue
        s = _spec(dt, rows, cols, vr, vc)
        _same("binary", lambda d, a, b: V.binary(op, d, a, b, target), s, [s, s], {"op": op}, target=target)
        for scalar in (1.5, -3, 0.0):
            _same(
                "binary_scalar",
                lambda d, a, scalar=scalar: V.binary_scalar(op, d, a, scalar, target),
                s,
                [s],
                {"op": op},
                (scalar,),
                target,
            )


@pytest.mark.parametrize("target", ["A2A3", "A5"])
@pytest.mark.parametrize("op", list(V.UNARY_OPS))
@pytest.mark.parametrize("hp", [False, True])
def test_unary_prepared_equals_the_call(target, op, hp):
    dts = ALU[target] if op in ("abs", "neg", "relu") else tuple(V.MATH_DTYPES[target])
    for rows, cols, vr, vc in SHAPES:
        for dt in dts:
            s = _spec(dt, rows, cols, vr, vc)
            _same(
                "unary",
                lambda d, a: V.unary(op, d, a, target, hp),
                s,
                [s],
                {"op": op, "high_precision": hp},
                target=target,
            )


@pytest.mark.parametrize("target", ["A2A3", "A5"])
@pytest.mark.parametrize("op", V.REDUCE_OPS)
def test_row_reduce_prepared_equals_the_call(target, op):
    for rows, cols, vr, vc in SHAPES:
        for dt in (F32, F16, I32, I16):
            src = _spec(dt, rows, cols, vr, vc)
            dst = _spec(dt, rows, 1, vr, 1, "DN")
            tmp = _spec(dt, rows, cols) if target == "A2A3" else None
            _same(
                "row_reduce",
                lambda d, a, t=None: V.row_reduce(op, d, a, t, target),
                dst,
                [src, tmp],
                {"op": op},
                target=target,
            )


@pytest.mark.parametrize("op", ["expand", *V.BINARY_OPS])
@pytest.mark.parametrize("block", [False, True])
def test_row_expand_prepared_equals_the_call(op, block):
    for rows, cols, vr, vc in SHAPES:
        for dt in (F32, F16, I32, I16):
            if op == "div" and dt.kind in "iu":
                continue
            s = _spec(dt, rows, cols, vr, vc)
            n = 32 // dt.itemsize
            r = _spec(dt, rows, n, vr, n) if block else _spec(dt, rows, 1, vr, 1, "DN")
            a = None if op == "expand" else s
            call = lambda d, *xs: V.row_expand(op, d, None if op == "expand" else xs[0], xs[-1])  # noqa: E731
            imgs = [_image(dt, rows, cols), _image(dt, r[0].rows, r[0].cols)]
            d0 = _image(dt, rows, cols)
            d1 = d0.copy()
            call(
                TileBuf.from_geometry(*s, d0),
                TileBuf.from_geometry(*s, imgs[0].copy()),
                TileBuf.from_geometry(*r, imgs[1].copy()),
            )
            prepare("row_expand", s, a, r, op=op)(d1, imgs[0], imgs[1])
            assert d1.tobytes() == d0.tobytes()


@pytest.mark.parametrize("op", ["expand", *V.BINARY_OPS])
@pytest.mark.parametrize("lanes", [1, 2, 4])
def test_col_expand_prepared_equals_the_call(op, lanes):
    for dt in (F32, F16, I32):
        if op == "div" and dt.kind in "iu":
            continue
        rows, cols, vc = 16 * lanes, 64, 40
        s = _spec(dt, rows, cols, rows, vc)
        c = _spec(dt, 8 * lanes, cols, 8 * lanes, vc)
        imgs = [_image(dt, rows, cols), _image(dt, 8 * lanes, cols)]
        d0 = _image(dt, rows, cols)
        d1 = d0.copy()
        a = None if op == "expand" else TileBuf.from_geometry(*s, imgs[0].copy())
        V.col_expand(
            op, TileBuf.from_geometry(*s, d0), a, TileBuf.from_geometry(*c, imgs[1].copy()), "A2A3", lanes
        )
        prepare("col_expand", s, None if op == "expand" else s, c, op=op, lanes=lanes)(d1, imgs[0], imgs[1])
        assert d1.tobytes() == d0.tobytes()


CVT = [
    (F32, F16),
    (F32, BF16),
    (F32, I32),
    (F32, I16),
    (F16, F32),
    (F16, I8),
    (BF16, F32),
    (I32, F32),
    (I16, F16),
]


@pytest.mark.parametrize(("src", "dst"), CVT)
@pytest.mark.parametrize("mode", V.ROUND_MODES)
def test_cvt_prepared_equals_the_call(src, dst, mode):
    for rows, cols, vr, vc in SHAPES:
        a, d = _spec(src, rows, cols, vr, vc), _spec(dst, rows, cols, vr, vc)
        _same("cvt", lambda o, x: V.cvt(o, x, mode), d, [a], {"mode": mode})


def _refusal(call):
    with pytest.raises(DeviceError) as err:
        call()
    return str(err.value)


@pytest.mark.parametrize(
    ("name", "dst", "srcs", "params", "call", "match"),
    [
        (
            "binary",
            (F32,),
            [(F16,), (F32,)],
            {"op": "add"},
            lambda d, a, b: V.binary("add", d, a, b),
            "dtypes differ",
        ),
        (
            "binary",
            (BF16,),
            [(BF16,), (BF16,)],
            {"op": "mul"},
            lambda d, a, b: V.binary("mul", d, a, b),
            "bfloat16",
        ),
        (
            "binary_scalar",
            (I32,),
            [(I32,)],
            {"op": "div"},
            lambda d, a: V.binary_scalar("div", d, a, 2),
            "div dtype",
        ),
        ("unary", (I16,), [(I16,)], {"op": "exp"}, lambda d, a: V.unary("exp", d, a), "exp dtype"),
        ("cvt", (I8,), [(F32,)], {"mode": "round"}, lambda d, a: V.cvt(d, a), "not a conversion"),
        ("cvt", (F16,), [(F32,)], {"mode": "bogus"}, lambda d, a: V.cvt(d, a, "bogus"), "unknown round mode"),
    ],
)
def test_a_refusal_is_raised_by_prepare_with_the_instructions_message(name, dst, srcs, params, call, match):
    d = _spec(dst[0], 16, 64)
    ss = [_spec(s[0], 16, 64) for s in srcs]
    want = _refusal(
        lambda: call(*(TileBuf.from_geometry(*x, np.zeros(x[0].nbytes, np.uint8)) for x in [d, *ss]))
    )
    got = _refusal(lambda: prepare(name, d, *ss, **params))
    assert got == want and match in got


def test_shape_refusals_are_raised_by_prepare():
    f = _spec(F32, 16, 64)
    part = _spec(F32, 16, 64, 8, 64)
    assert "differs from the destination" in _refusal(lambda: prepare("binary", f, f, part, op="add"))
    col = _spec(F32, 16, 1, 16, 1, "DN")
    small = _spec(F32, 16, 8)  # 512 bytes: the reduction needs 16 * 64 * 4
    msg = _refusal(lambda: prepare("row_reduce", col, f, small, op="sum"))
    assert msg.startswith("TROWSUM: tmp holds 512 bytes")
    assert "needs a tmp tile" in _refusal(lambda: prepare("row_reduce", col, f, None, op="sum"))
    bad_row = _spec(F32, 16, 16)  # neither [R, 1] nor one 32-byte block per row
    assert "per-row operand must be" in _refusal(lambda: prepare("row_expand", f, f, bad_row, op="add"))
    assert "not a prepared vector instruction" in _refusal(lambda: prepare("fillpad", f, f))
    assert "binary" in PREPARED


def test_prepare_writes_nothing_of_the_callers():
    """prepare's trial run is on zero images of its own: the caller's buffers are untouched until
    the prepared form is called."""
    s = _spec(F32, 16, 64)
    img = _image(F32, 16, 64)
    before = img.copy()
    p = prepare("unary", s, s, op="exp")
    assert img.tobytes() == before.tobytes()
    out = np.zeros_like(img)
    p(out, img)
    np.testing.assert_array_equal(out.view(F32), np.exp(before.view(F32)))
