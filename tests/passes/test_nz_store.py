"""Accumulator write-back into NZ (NZ-20..24): IR facts of BlockNzTensorViews and AutoTileMatmulL0,
and one refusal per row of the NZ-21 table. Run with NZJIT_VERIFY=1 (the IR verifier after every
pass). No `from __future__ import annotations`: kernel annotations use closure values."""

import inspect

import pytest

import nzjit
from nzjit import pl
from nzjit.core.types import Layout, TensorType
from nzjit.passes import block_nz_store
from nzjit.passes.block_nz_store import check_nz_store_emission

L0C = 128 * 1024


def _stores(g):
    return [e for e in g.walk() if e.primitive.name == "tile.store"]


def _offsets(e):
    return [getattr(a, "value", a) for a in e.operands("offsets")]


def _line(kernel, text):
    """The file line of the first kernel source line containing `text`."""
    lines, start = inspect.getsourcelines(kernel.__wrapped__)
    return start + next(i for i, s in enumerate(lines) if text in s)


def _refused(kernel, text="pl.store", rule=None):
    """Lowering raises a CompileError at the kernel line containing `text`; returns the message."""
    with pytest.raises(nzjit.CompileError) as ei:
        kernel.lower()
    err = ei.value
    where = f"{kernel.__wrapped__.__code__.co_filename}:{_line(kernel, text)}: "
    assert str(err).startswith(where), (str(err), where)
    if rule is not None:
        assert err.rule == rule, str(err)
    assert err.help, "every NZ store refusal says how to fix it"
    return str(err)


def _mm_store(
    M=64, K=32, N=16, R=None, C=None, offs=(0, 0), target=pl.A2A3, adt=pl.FP16, odt=pl.FP32, **attrs
):
    """a[M,K] @ b[N,K]^T stored at `offs` into an NZ [R, C] target."""
    R = M if R is None else R
    C = N if C is None else C

    @pl.kernel(target=target)
    def k(a: pl.Tensor[[M, K], adt], b: pl.Tensor[[N, K], adt], out: pl.Out[pl.Tensor[[R, C], odt, pl.NZ]]):
        at = pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        bt = pl.load(b, [0, 0], [N, K], target_memory=pl.Mem.Mat)
        acc = pl.matmul(at, bt, b_trans=True)
        pl.store(acc, list(offs), out, **attrs)

    return k


# ------------------------------------------------------------------------ NZ-20: the rewrite
def test_store_64x16_blocked_offsets_partition_and_strides():  # NZ-20
    low = _mm_store(st_phase="Final").lower()
    (st,) = _stores(low.ir(after="BlockNzTensorViews"))
    assert _offsets(st) == [0, 0, 0, 0, 0]
    assert st.params["nz_partition"] == (1, 2, 4, 16, 8)
    dst = st.inputs[-1].type
    assert isinstance(dst, TensorType) and dst.layout is Layout.NZ and dst.shape == (1, 2, 4, 16, 8)
    assert st.outputs[0].type == dst  # the store returns an alias of the (blocked) target
    assert st.inputs[0].type.shape == (64, 16)  # the Acc tile keeps its logical 2-D type
    (final,) = _stores(low.ir())
    assert final.inputs[-1].type.strides == (1024, 512, 128, 8, 1)  # after MaterializeTensorStrides (NZ-7)
    assert final.params["nz_partition"] == (1, 2, 4, 16, 8)
    assert low.ir().params[2].type.strides == (1024, 512, 128, 8, 1)


def test_store_keeps_attrs():  # NZ-20
    low = _mm_store(st_phase="Final").lower()
    for stage in ("BlockNzTensorViews", "AutoTileMatmulL0", "MaterializeTensorStrides"):
        (st,) = _stores(low.ir(after=stage))
        assert st.params["attrs"] == {"st_phase": "Final"}
    assert "st_phase=Final" in str(low.ir())


def test_store_rewrite_is_idempotent():  # NZ-15
    from nzjit.passes.block_nz import block_nz_tensor_views

    low = _mm_store().lower()
    g = low.ir(after="BlockNzTensorViews")
    assert block_nz_tensor_views(g) is g


def test_column_offset_and_batch_offset_are_blocked():  # NZ-20, NZ-24
    @pl.kernel
    def k(
        a: pl.Tensor[[32, 16], pl.FP16],
        b: pl.Tensor[[16, 32], pl.FP16],
        out: pl.Out[pl.Tensor[[3, 32, 64], pl.FP32, pl.NZ]],
    ):
        at = pl.load(a, [0, 0], [32, 16], target_memory=pl.Mem.Mat)
        bt = pl.load(b, [0, 0], [16, 32], target_memory=pl.Mem.Mat)
        acc = pl.matmul(at, bt)
        pl.store(acc, [2, 0, 32], out)

    (st,) = _stores(k.lower().ir(after="BlockNzTensorViews"))
    assert _offsets(st) == [2, 4, 0, 0, 0]
    assert st.params["nz_partition"] == (1, 4, 2, 16, 8)


def test_symbolic_column_offset_is_proven_and_divided():  # NZ-16, NZ-17, NZ-20
    @pl.kernel
    def k(
        a: pl.Tensor[[32, 16], pl.FP16],
        b: pl.Tensor[[16, 64], pl.FP16],
        out: pl.Out[pl.Tensor[[32, 64], pl.FP32, pl.NZ]],
    ):
        at = pl.load(a, [0, 0], [32, 16], target_memory=pl.Mem.Mat)
        for j in pl.range(0, 64, 32):
            bt = pl.load(b, [0, j], [16, 32], target_memory=pl.Mem.Mat)
            acc = pl.matmul(at, bt)
            pl.store(acc, [0, j], out)

    (st,) = _stores(k.lower().ir(after="BlockNzTensorViews"))
    assert st.params["nz_partition"] == (1, 4, 2, 16, 8)
    assert any("8 | j" in p for p in st.params["proofs"])
    col = st.operands("offsets")[1]
    assert not hasattr(col, "value")  # floordiv(j, 8) of the value, emitted in the body


def test_block_nz_receives_the_target():  # NZ-21: block_nz_tensor_views(g, target)
    from nzjit.passes.block_nz import block_nz_tensor_views

    g = _mm_store().lower().ir(after="FlattenTileNdTo2D")
    assert _stores(block_nz_tensor_views(g, "A2A3"))[0].params["nz_partition"] == (1, 2, 4, 16, 8)
    with pytest.raises(nzjit.CompileError, match="A2/A3 backend only"):
        block_nz_tensor_views(g, "A5")


# ------------------------------------------------------------------- NZ-21: one refusal per row
def test_refuse_a5_backend():  # NZ-21 backend
    msg = _refused(_mm_store(target=pl.A5), rule="NZ-21")
    assert "A5" in msg and "A2/A3" in msg


def test_refuse_int32_acc_into_int32_nz():  # NZ-21 dtype pair
    msg = _refused(_mm_store(adt=pl.INT8, odt=pl.INT32, K=32), rule="NZ-21")
    assert "FP32 Acc -> FP32 GM only" in msg and "INT32" in msg


def test_refuse_fp32_acc_into_fp16_nz():  # NZ-21 dtype pair (no conversion)
    msg = _refused(_mm_store(odt=pl.FP16), rule="NZ-21")
    assert "FP32 Acc -> FP32 GM only" in msg and "FP16" in msg


@pytest.mark.parametrize("mem", [pl.Mem.Vec, pl.Mem.Mat])
def test_refuse_vec_or_mat_source(mem):  # NZ-21 non-Acc source
    @pl.kernel
    def k(x: pl.Tensor[[32, 16], pl.FP32], out: pl.Out[pl.Tensor[[32, 16], pl.FP32, pl.NZ]]):
        t = pl.load(x, [0, 0], [32, 16], target_memory=mem)
        pl.store(t, [0, 0], out)

    msg = _refused(k, rule="NZ-21")
    assert f"pl.Mem.{mem.value} tile" in msg and "Vec or Mat source is not supported" in msg


def test_refuse_dynamic_valid_tile():  # NZ-21 dynamic tile
    @pl.kernel
    def k(
        x: pl.Tensor[[32, 16], pl.FP32],
        n: pl.Scalar[pl.INDEX],
        out: pl.Out[pl.Tensor[[32, 16], pl.FP32, pl.NZ]],
    ):
        t = pl.load(x, [0, 0], [32, 16], target_memory=pl.Mem.Acc, valid_shape=[n, 16])
        pl.store(t, [0, 0], out)

    msg = _refused(k, rule="NZ-21")
    assert "is dynamic" in msg


def test_refuse_partially_valid_tile():  # NZ-21 partially valid tile
    @pl.kernel
    def k(x: pl.Tensor[[32, 16], pl.FP32], out: pl.Out[pl.Tensor[[32, 16], pl.FP32, pl.NZ]]):
        t = pl.load(x, [0, 0], [32, 16], target_memory=pl.Mem.Acc, valid_shape=[16, 16])
        pl.store(t, [0, 0], out)

    msg = _refused(k, rule="NZ-21")
    assert "partially valid" in msg


def test_refuse_rows_not_multiple_of_16():  # NZ-21 tile shape
    msg = _refused(_mm_store(M=24, R=48), rule="NZ-21")
    assert "rows 24 must be a multiple of 16" in msg


def test_refuse_cols_not_multiple_of_16_even_one_column_block():  # NZ-21, NZ-23: no 8-column exception
    msg = _refused(_mm_store(M=32, N=8, C=16), rule="NZ-21")
    assert "cols 8 must be a multiple of 16" in msg and "single-column-block" in msg


def test_refuse_row_sub_window():  # NZ-21 row window, NZ-23
    msg = _refused(_mm_store(M=64, N=16, R=128, C=32), rule="NZ-23")
    assert "full row axis" in msg and "dstStride" in msg and "128 rows" in msg


def test_refuse_row_sub_window_at_row_64():  # NZ-23: the lower half is refused just the same
    msg = _refused(_mm_store(M=64, N=16, R=128, C=32, offs=(64, 16)), rule="NZ-23")
    assert "full row axis" in msg


def test_refuse_non_zero_row_offset():  # NZ-21 row offset 0
    msg = _refused(_mm_store(M=32, N=16, R=32, C=16, offs=(16, 0)), rule="NZ-23")
    assert "row offset '16' must be 0" in msg


def test_refuse_symbolic_row_offset():  # NZ-21 row offset 0
    @pl.kernel
    def k(x: pl.Tensor[[32, 16], pl.FP32], out: pl.Out[pl.Tensor[[32, 16], pl.FP32, pl.NZ]]):
        t = pl.load(x, [0, 0], [32, 16], target_memory=pl.Mem.Acc)
        for r in pl.range(0, 16, 16):
            pl.store(t, [r, 0], out)

    msg = _refused(k, rule="NZ-23")
    assert "must be 0" in msg


def test_refuse_unaligned_literal_column_offset():  # NZ-21 column offset
    msg = _refused(_mm_store(M=32, N=16, R=32, C=32, offs=(0, 4)), rule="NZ-21")
    assert "must be a non-negative multiple of 8" in msg


def test_refuse_unprovable_column_offset():  # NZ-21 unknown alignment, NZ-16
    @pl.kernel
    def k(
        x: pl.Tensor[[32, 16], pl.FP32],
        c: pl.Scalar[pl.INDEX],
        out: pl.Out[pl.Tensor[[32, 64], pl.FP32, pl.NZ]],
    ):
        t = pl.load(x, [0, 0], [32, 16], target_memory=pl.Mem.Acc)
        pl.store(t, [0, c], out)

    msg = _refused(k, rule="NZ-16")
    assert "cannot be proven" in msg and "c0 = 8" in msg


def test_refuse_column_offset_of_unknown_sign():  # NZ-21 unknown sign, NZ-18
    @pl.kernel
    def k(x: pl.Tensor[[32, 16], pl.FP32], out: pl.Out[pl.Tensor[[32, 64], pl.FP32, pl.NZ]]):
        t = pl.load(x, [0, 0], [32, 16], target_memory=pl.Mem.Acc)
        for j in pl.range(1, 3):
            c = j * 16 - 16
            pl.store(t, [0, c], out)

    msg = _refused(k, text="pl.store(t, [0, c]", rule="NZ-18")
    assert "cannot be proven non-negative" in msg


def test_refuse_column_window_past_the_end():  # NZ-21
    msg = _refused(_mm_store(M=32, N=32, R=32, C=32, offs=(0, 8)), rule="NZ-21")
    assert "exceed" in msg


@pytest.mark.parametrize(
    "attr, value",
    [
        ("atomic", "add"),
        ("atomic", True),
        ("pre_quant", "f322f16"),
        ("pre_relu", True),
        ("dtype", pl.FP16),
        ("out_dtype", pl.BF16),
    ],
)
def test_refuse_atomic_quant_relu_and_conversion_attrs(attr, value):  # NZ-21 attributes
    msg = _refused(_mm_store(**{attr: value}), rule="NZ-21")
    assert f"attribute {attr}=" in msg and "not supported" in msg


def test_switched_off_attrs_are_accepted():  # NZ-21: atomic=None is a plain write
    low = _mm_store(atomic=None, pre_relu=False).lower()
    (st,) = _stores(low.ir())
    assert st.params["nz_partition"] == (1, 2, 4, 16, 8)


def test_refuse_multi_panel_store():  # NZ-24: one panel per store
    @pl.kernel
    def k(x: pl.Tensor[[64, 16], pl.FP32], out: pl.Out[pl.Tensor[[2, 32, 16], pl.FP32, pl.NZ]]):
        t = pl.load(x, [0, 0], [64, 16], target_memory=pl.Mem.Acc)
        pl.store(t, [0, 0, 0], out)

    msg = _refused(k, rule="NZ-24")
    assert "one panel per store" in msg


# -------------------------------------------------------------- NZ-22: AutoTileMatmulL0 split
def _split_kernel(M, K, N, dtype=pl.FP16):
    @pl.kernel
    def k(
        a: pl.Tensor[[M, K], dtype],
        b: pl.Tensor[[K, N], dtype],
        out: pl.Out[pl.Tensor[[M, N], pl.FP32, pl.NZ]],
    ):
        at = pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        bt = pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat)
        acc = pl.matmul(at, bt)
        pl.store(acc, [0, 0], out, st_phase="Final")

    return k


def _check_emitted(g, M, N):
    """Every emitted store: full M, field limits, L0C; the blocks tile the N axis exactly once."""
    cols = []
    for st in _stores(g):
        g0, g1, g2, g3, g4 = st.params["nz_partition"]
        rows, n = g2 * g3, g1 * g4
        assert (g0, g3, g4) == (1, 16, 8) and rows == M
        assert rows <= 65535 and n <= 4095 and rows * n * 4 <= L0C
        assert st.inputs[0].type.shape == (M, n)
        b, c, r, z0, z1 = _offsets(st)
        assert (b, r, z0, z1) == (0, 0, 0, 0)
        cols.append((c * 8, n))
        assert st.params["attrs"] == {"st_phase": "Final"}
    cols.sort()
    assert cols[0][0] == 0 and all(a + n == b for (a, n), (b, _) in zip(cols, cols[1:]))
    assert cols[-1][0] + cols[-1][1] == N
    return cols


def test_split_64x1024_into_blocks_that_fit_l0c():  # NZ-22
    g = _split_kernel(64, 32, 1024).lower().ir(after="AutoTileMatmulL0")
    cols = _check_emitted(g, 64, 1024)
    assert len(cols) == 2 and [n for _, n in cols] == [512, 512]
    assert [e.primitive.name for e in g.walk()].count("tile.mad") == 2


def test_split_n_8192_under_the_column_field():  # NZ-22
    g = _split_kernel(16, 16, 8192).lower().ir(after="AutoTileMatmulL0")
    cols = _check_emitted(g, 16, 8192)
    assert len(cols) == 4 and all(n == 2048 for _, n in cols)


def test_split_keeps_k_tiling():  # NZ-22: K chunks still allowed, M never split
    g = _split_kernel(64, 1024, 1024).lower().ir(after="AutoTileMatmulL0")
    _check_emitted(g, 64, 1024)
    loops = [e for e in g.walk() if e.primitive.name == "for"]
    assert loops and all(e.params["kind"] == "pipeline" for e in loops)


def test_split_impossible_with_full_m_has_a_dedicated_diagnostic():  # NZ-22
    msg = _refused(_split_kernel(4096, 16, 16), rule="NZ-22")
    assert "L0C" in msg and "full M = 4096" in msg and "along N" in msg


def test_split_without_a_legal_k_chunk_has_a_dedicated_diagnostic():  # NZ-22
    # a 16-column block of 2048 rows fills L0C exactly, but the smallest K chunk of Left (16 FP32
    # columns, whole fractals) needs 128 KiB of L0A's 64
    msg = _refused(_split_kernel(2048, 16, 32, pl.FP32), rule="NZ-22")
    assert "L0C" in msg and "full M = 2048" in msg


def test_emission_check_field_limits_and_l0c():  # NZ-21 per-instruction extent, NZ-22
    check_nz_store_emission(2048, 16, L0C, None)
    check_nz_store_emission(16, 2048, L0C, None)
    with pytest.raises(nzjit.CompileError, match="65535 rows"):
        check_nz_store_emission(65536, 16, 1 << 40, None)
    with pytest.raises(nzjit.CompileError, match="4095 columns"):
        check_nz_store_emission(16, 4096, 1 << 40, None)
    with pytest.raises(nzjit.CompileError, match="L0C"):
        check_nz_store_emission(32, 1040, L0C, None)


def test_bypass_switch_is_off_by_default_and_restored():  # NZ-23
    assert block_nz_store._UNSAFE_SKIP_FULL_ROW_CHECK_FOR_TESTS is False
    with block_nz_store.unsafe_skip_full_row_check_for_tests():
        assert block_nz_store._UNSAFE_SKIP_FULL_ROW_CHECK_FOR_TESTS is True
        low = _mm_store(M=64, N=16, R=128, C=32, offs=(64, 16)).lower()
    assert block_nz_store._UNSAFE_SKIP_FULL_ROW_CHECK_FOR_TESTS is False
    (st,) = _stores(low.ir(after="BlockNzTensorViews"))
    assert _offsets(st) == [0, 2, 4, 0, 0] and st.params["nz_partition"] == (1, 2, 4, 16, 8)


def test_split_diagnostics_name_the_sizes():  # NZ-22: the numbers a user needs to pick a shape
    msg = _refused(_split_kernel(4096, 16, 16), rule="NZ-22")
    assert "even a 16-column block of 4096 rows needs 256 KiB" in msg  # 4096 * 16 * 4 B
    msg = _refused(_split_kernel(2048, 16, 32, pl.FP32), rule="NZ-22")
    assert "fits L0A/L0B (64/64 KiB)" in msg


# ------------------------------------------------ NZ-21: a ragged N tile (issue 23's clamped rhs)
@pl.kernel
def _ragged_n_into_nz(
    x: pl.Tensor[[16, 64], pl.FP16],
    w: pl.Tensor[[48, 64], pl.FP16, pl.NZ],
    y: pl.InOut[pl.Tensor[[16, 64], pl.FP32, pl.NZ]],
):
    a = pl.load(x, [0, 0], [16, 64], target_memory=pl.Mem.Mat)
    b = pl.load(w, [0, 0], [64, 64], target_memory=pl.Mem.Mat, clamp=True)  # valid rows 48 of 64
    pl.store(pl.matmul(a, b, b_trans=True), [0, 0], y)


def test_ragged_n_tile_stores_its_valid_column_blocks_only():  # NZ-21
    import warnings

    import numpy as np

    import runtime

    rng = np.random.default_rng(3)
    x = rng.integers(-2, 3, (16, 64)).astype(np.float16)
    w = rng.integers(-2, 3, (48, 64)).astype(np.float16)
    y = np.full((16, 64), 7, np.float32)
    low = _ragged_n_into_nz.lower(x, runtime.pack_nz(w), runtime.pack_nz(y))
    stores = [ln for ln in str(low.final).splitlines() if "tile.store[" in ln]
    assert len(stores) == 1 and "nz_partition=(1, 6, 1, 16, 8)" in stores[0]  # 48 FP32 columns: 6 C0 lines
    yn = runtime.pack_nz(y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no PTO_ASSERT mismatch (validCol == the partition's columns)
        _ragged_n_into_nz(x, runtime.pack_nz(w), yn)
    got = runtime.unpack_nz(yn)
    ref = x.astype(np.float32) @ w.astype(np.float32).T
    np.testing.assert_array_equal(got[:, :48], ref)
    assert (got[:, 48:] == 7).all()  # past the valid columns: untouched


def test_refuse_ragged_n_tile_whose_valid_columns_are_not_whole_blocks():  # NZ-21
    @pl.kernel
    def k(
        x: pl.Tensor[[16, 64], pl.FP16],
        w: pl.Tensor[[64, 44], pl.FP16],
        y: pl.InOut[pl.Tensor[[16, 64], pl.FP32, pl.NZ]],
    ):
        a = pl.load(x, [0, 0], [16, 64], target_memory=pl.Mem.Mat)
        b = pl.load(w, [0, 0], [64, 64], target_memory=pl.Mem.Mat, clamp=True)  # valid cols 44
        pl.store(pl.matmul(a, b), [0, 0], y)

    msg = _refused(k, rule="NZ-21")
    assert "has [44] valid columns" in msg and "validCol % 16 == 0" in msg
    assert "pad the N tail to a multiple of 16 columns, or store into an ND output" in msg


# ------------------------------------------------ NZ-21: dynamic valid columns (a clamped N tail at a run-time offset)
@pl.kernel
def _dynamic_n_tail_into_nz(
    x: pl.Tensor[[16, 64], pl.FP16],
    w: pl.Tensor[[88, 64], pl.FP16],
    y: pl.InOut[pl.Tensor[[16, 128], pl.FP32, pl.NZ]],
    n0: pl.Scalar[pl.INDEX],
):
    a = pl.load(x, [0, 0], [16, 64], target_memory=pl.Mem.Mat)
    b = pl.load(w, [n0, 0], [64, 64], target_memory=pl.Mem.Mat, clamp=True)  # valid rows min(64, 88 - n0)
    pl.store(pl.matmul(a, b, b_trans=True), [0, 0], y)  # <- dynamic store


def _dyn_inputs():
    import numpy as np

    rng = np.random.default_rng(5)
    x = rng.integers(-2, 3, (16, 64)).astype(np.float16)
    w = rng.integers(-2, 3, (88, 64)).astype(np.float16)
    return x, w


def test_dynamic_valid_columns_partition_is_narrowed_at_run_time():  # NZ-21
    import numpy as np

    import runtime

    x, w = _dyn_inputs()
    low = _dynamic_n_tail_into_nz.lower(x, w, runtime.pack_nz(np.zeros((16, 128), np.float32)), 0)
    stores = [ln for ln in str(low.final).splitlines() if "tile.store[" in ln]
    assert len(stores) == 1 and "nz_partition=(1, 8, 1, 16, 8) nz_dynamic_cols=True" in stores[0]
    text = str(low.pto())
    assert "%col_blocks = arith.divui %vwin, %c8 : index" in text
    assert "sizes = [%c1, %col_blocks, %c1, %c16, %c8]" in text
    nzjit.check_ptoas(text)


@pytest.mark.parametrize("n0", [0, 40, 56])  # 64, 48 and 32 valid columns: whole 16-column blocks
def test_dynamic_valid_columns_in_whole_blocks_store_exactly(n0):  # NZ-21
    import warnings

    import numpy as np

    import runtime

    x, w = _dyn_inputs()
    y = np.full((16, 128), 7, np.float32)
    yn = runtime.pack_nz(y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # validCol equals the partition's columns: no PTO_ASSERT warning
        _dynamic_n_tail_into_nz(x, w, yn, n0)
    got = runtime.unpack_nz(yn)
    v = min(64, 88 - n0)
    ref = x.astype(np.float32) @ w[n0 : n0 + v].astype(np.float32).T
    np.testing.assert_array_equal(got[:, :v], ref)
    assert (got[:, v:] == 7).all()  # past the valid columns: untouched


@pytest.mark.parametrize("n0", [32, 48, 80])  # 56, 40 and 8 valid columns: not whole blocks
def test_dynamic_valid_columns_not_whole_blocks_are_refused_before_writing(n0, line_of):  # NZ-21
    import numpy as np

    import runtime

    x, w = _dyn_inputs()
    yn = runtime.pack_nz(np.full((16, 128), 7, np.float32))
    with pytest.raises(runtime.DeviceError) as ei:
        _dynamic_n_tail_into_nz(x, w, yn, n0)
    msg = str(ei.value)
    line = line_of(_dynamic_n_tail_into_nz.__wrapped__, "# <- dynamic store")
    assert f"test_nz_store.py:{line}" in msg and "NZ-21" in msg
    assert f"has {88 - n0} valid columns at run time" in msg and "validCol % 16 == 0" in msg
    assert "help: make the N tail a multiple of 16 columns, or store into an ND output" in msg
    assert (runtime.unpack_nz(yn) == 7).all()  # nothing was written


@pytest.mark.parametrize("rows_w", [112, 104])  # second trip: 48 valid columns (exact) / 40 (refused)
def test_dynamic_valid_columns_in_a_staged_loop(rows_w):  # NZ-21
    import numpy as np

    import runtime

    @pl.kernel
    def k(
        x: pl.Tensor[[16, 64], pl.FP16],
        w: pl.Tensor[[rows_w, 64], pl.FP16],
        y: pl.InOut[pl.Tensor[[16, 128], pl.FP32, pl.NZ]],
    ):
        a = pl.load(x, [0, 0], [16, 64], target_memory=pl.Mem.Mat)
        for j in pl.range(2):
            n0 = j * 64
            b = pl.load(w, [n0, 0], [64, 64], target_memory=pl.Mem.Mat, clamp=True)
            pl.store(pl.matmul(a, b, b_trans=True), [0, n0], y)

    rng = np.random.default_rng(7)
    x = rng.integers(-2, 3, (16, 64)).astype(np.float16)
    w = rng.integers(-2, 3, (rows_w, 64)).astype(np.float16)
    yn = runtime.pack_nz(np.full((16, 128), 7, np.float32))
    if rows_w % 16:
        with pytest.raises(runtime.DeviceError, match="NZ-21: .* has 40 valid columns at run time"):
            k(x, w, yn)
        assert (runtime.unpack_nz(yn)[:, 64:] == 7).all()  # the refused store wrote nothing
        return
    k(x, w, yn)
    got = runtime.unpack_nz(yn)
    np.testing.assert_array_equal(got[:, :rows_w], x.astype(np.float32) @ w.astype(np.float32).T)
    assert (got[:, rows_w:] == 7).all()
