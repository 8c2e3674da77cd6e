"""pld as a language (issue 28): types, IR facts, PTO text and every refusal with its message."""

from __future__ import annotations

import numpy as np
import pytest
from pld_kernels import SIZE, collective_kernels, mesh_allreduce

import runtime
from nzjit import CompileError, pl, pld


def _lower_error(kernel) -> str:
    with pytest.raises(CompileError) as ei:
        kernel.lower()
    return str(ei.value)


# --------------------------------------------------------------------------------- IR and text
def test_window_parameters_are_distributed_tensors_in_the_ir() -> None:
    ir = str(mesh_allreduce.lower().ir("trace"))
    assert "data:dist f32[1,64] signal:dist i32[NR,1]" in ir
    assert "me:i32 = comm.rank data" in ir and "n:i32 = comm.nranks data" in ir
    assert "comm.notify[op=set] signal_1 d me_1 0 1" in ir  # inside the notify loop
    assert "comm.wait[cmp=ge] signal_2 peer 0 1" in ir
    assert "g:f32[1,64]@Vec = comm.remote_load[shape=(1, 64)] data_1 peer 0 0" in ir


def test_window_types_survive_every_pass() -> None:
    final = str(mesh_allreduce.lower().ir())
    assert "data:dist f32[1,64]/[64,1]" in final  # MaterializeTensorStrides keeps the window type
    assert final.count("comm.") == str(mesh_allreduce.lower().ir("trace")).count("comm.")


def test_collectives_rebind_their_target() -> None:
    ir = str(collective_kernels(2)["allreduce"].lower().ir("trace"))
    assert "data_1:dist f32[2,64] = comm.allreduce[op=sum mode=mesh] data signal" in ir
    assert "tile.load[shape=(2, 64) memory=Vec] data_1 0 0" in ir  # later reads see the reduced value
    ir = str(collective_kernels(2)["put_get"].lower().ir("trace"))
    assert "comm.put[shape=(1, 64) atomic=False] data b x 0 0 0 0" in ir
    assert "comm.get[shape=(1, 64)] z g data 0 0 0 0" in ir


def test_pto_text_of_signals_and_remote_access() -> None:
    text = mesh_allreduce.lower().pto()
    assert '%me = pto.comm.ctx_field %data_view {field = "rankId"} : i32' in text
    assert '%n = pto.comm.ctx_field %data_view {field = "rankNum"} : i32' in text
    assert "pto.comm.peer_view %signal_view, " in text
    assert ": !pto.partition_tensor_view<1x1xi32>, i32) {notifyOp = #pto<notify_op set>}" in text
    assert ": !pto.partition_tensor_view<1x1xi32>, i32) {cmp = #pto<wait_cmp ge>}" in text
    assert "pto.comm.peer_view %data_view, " in text
    text = collective_kernels(2)["atomic_sum"].lower().pto()
    assert "outs(%data_peer_pview : !pto.partition_tensor_view<1x64xf32>) {atomic = add}" in text
    assert "pto.comm.barrier %signal_view : !pto.tensor_view<?x?xi32>" in text
    text = collective_kernels(2)["allreduce"].lower().pto()
    assert 'pto.comm.allreduce %data_view, %signal_view {op = "sum", mode = "mesh"}' in text


# ------------------------------------------------------------------------------------ refusals
def test_a_distributed_nz_tensor_is_refused() -> None:
    """nz-layout.md §7 table, row "distributed (remote) tensor" (the seed's row)."""
    with pytest.raises(CompileError) as ei:
        pld.DistributedTensor[[64, 64], pl.FP16, pl.NZ]
    assert "pld.DistributedTensor: distributed tensor: refused — remote_load has no NZ blocking" in str(
        ei.value
    )
    assert "keep an NZ weight a local argument" in str(ei.value)


def test_remote_load_of_a_plain_tensor_is_refused(line_of) -> None:
    @pl.kernel
    def k(x: pl.Tensor[[1, SIZE], pl.FP32], y: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]]):
        pl.store(pld.tile.remote_load(x, 0, [0, 0], [1, SIZE]), [0, 0], y)  # MARK

    msg = _lower_error(k)
    assert msg.startswith(
        f"{__file__}:{line_of(k, 'MARK')}: pld.tile.remote_load: the target must be a "
        "pld.DistributedTensor (a window), got f32[1,64]"
    )


@pytest.mark.parametrize(
    "body,expected",
    [
        ("notify_fp32", "pld.system.notify: a signal is an INT32 window, got dist f32[1,64]"),
        ("notify_offsets", "pld.system.notify into a rank-2 window needs 2 offsets, got 1"),
        ("notify_op", "pld.system.notify: op= takes pld.NotifyOp.AtomicAdd, pld.NotifyOp.Set, got 'set'"),
        ("wait_cmp", "pld.system.wait: cmp= takes pld.WaitCmp.Eq, pld.WaitCmp.Ge, got 1"),
        ("store_dtype", "pld.tile.remote_store of a pl.INT32 tile into a pl.FP32 window"),
        ("reduce_scatter_max", "pld.tensor.reduce_scatter supports only ReduceOp.Sum, got ReduceOp.Max"),
        ("world_size", "pld.world_size() is host-only; in a kernel use pld.nranks(pld.get_comm_ctx(window))"),
        (
            "oob",
            "pld.tile.remote_load window [32, 96) on axis 1 is out of bounds for the dimension 64 of [1, 64]",
        ),
        ("valid", "pld.tile.remote_load valid_shape takes one static int per tile axis"),
        ("pipeline", "pld.tensor.put pipeline=True requires both chunk_rows > 0 and chunk_cols > 0"),
        ("alloc", "pld.alloc_window_buffer is called in an @pl.orchestration body"),
        ("gather_self", "pld.tensor.allgather: local_data and target must be different windows"),
    ],
)
def test_kernel_refusals(body: str, expected: str) -> None:
    @pl.kernel
    def k(
        x: pl.Tensor[[1, SIZE], pl.INT32],
        data: pl.InOut[pld.DistributedTensor[[1, SIZE], pl.FP32]],
        sig: pl.InOut[pld.DistributedTensor[[2, 1], pl.INT32]],
    ):
        if body == "notify_fp32":
            pld.system.notify(data, 0, [0, 0], 1, op=pld.NotifyOp.Set)
        elif body == "notify_offsets":
            pld.system.notify(sig, 0, [0], 1, op=pld.NotifyOp.Set)
        elif body == "notify_op":
            pld.system.notify(sig, 0, [0, 0], 1, op="set")
        elif body == "wait_cmp":
            pld.system.wait(sig, [0, 0], 1, cmp=1)
        elif body == "store_dtype":
            pld.tile.remote_store(pl.load(x, [0, 0], [1, SIZE]), data, 1, [0, 0])
        elif body == "reduce_scatter_max":
            pld.tensor.reduce_scatter(data, sig, op=pld.ReduceOp.Max)
        elif body == "world_size":
            pld.world_size()
        elif body == "oob":
            pld.tile.remote_load(data, 1, [0, 32], [1, SIZE])
        elif body == "valid":
            pld.tile.remote_load(
                data, 1, [0, 0], [1, SIZE], valid_shape=[1, pld.rank(pld.get_comm_ctx(data))]
            )
        elif body == "pipeline":
            pld.tensor.put(data, 1, data, pipeline=True)
        elif body == "alloc":
            pld.alloc_window_buffer(64)
        elif body == "gather_self":
            pld.tensor.allgather(data, data, sig)

    assert expected in _lower_error(k)


def test_atomic_add_needs_a_hardware_atomic_dtype() -> None:
    @pl.kernel
    def k(x: pl.Tensor[[1, 32], pl.UINT8], data: pl.InOut[pld.DistributedTensor[[1, 32], pl.UINT8]]):
        pld.tile.remote_store(pl.load(x, [0, 0], [1, 32]), data, 1, [0, 0], atomic=pld.AtomicType.Add)

    assert (
        "pld.tile.remote_store atomic=AtomicType.Add needs a f32/bf16/f16/i32/i16/i8 window, got pl.UINT8"
        in _lower_error(k)
    )


def test_orchestration_side_refusals() -> None:
    with pytest.raises(CompileError, match=r"pld.alloc_window_buffer is called in an @pl.orchestration body"):
        pld.alloc_window_buffer([4], dtype=pl.FP32)
    with pytest.raises(CompileError, match=r"pld.get_comm_ctx is a kernel operation"):
        pld.get_comm_ctx(None)

    @pl.orchestration
    def bytes_not_elements(x: pl.Tensor[[2, 1, SIZE], pl.FP32], y: pl.Out[pl.Tensor[[2, 1, SIZE], pl.FP32]]):
        sig = pld.alloc_window_buffer(2)  # PyPTO pitfall: the size is in BYTES
        pld.window(sig, [2, 1], dtype=pl.INT32)

    with pytest.raises(CompileError) as ei:
        bytes_not_elements(np.zeros((2, 1, SIZE), np.float32), cluster=runtime.Cluster(2))
    assert "pld.window(sig, [2, 1], dtype=pl.INT32) needs 8 bytes; the buffer has 2 bytes per rank" in str(
        ei.value
    )
    assert "alloc_window_buffer's size is in bytes: use its shape form" in str(ei.value)

    @pl.orchestration
    def bad_size(x: pl.Tensor[[2, 1, SIZE], pl.FP32]):
        pld.alloc_window_buffer(0)

    with pytest.raises(CompileError, match="size is a positive number of BYTES, got 0"):
        bad_size(np.zeros((2, 1, SIZE), np.float32), cluster=runtime.Cluster(2))


def test_a_window_goes_only_to_a_distributed_parameter() -> None:
    @pl.kernel
    def plain(x: pl.Tensor[[1, SIZE], pl.FP32], y: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]]):
        pl.store(pl.load(x, [0, 0], [1, SIZE]), [0, 0], y)

    @pl.orchestration
    def prog(y: pl.Out[pl.Tensor[[2, 1, SIZE], pl.FP32]]):
        buf = pld.alloc_window_buffer([1, SIZE], dtype=pl.FP32)
        for r in range(2):
            plain(pld.window(buf, [1, SIZE], dtype=pl.FP32), y[r], device=r)

    with pytest.raises(
        runtime.DispatchError,
        match="parameter 'x' got the window 'buf'; a window goes to a pld.DistributedTensor parameter",
    ):
        prog(cluster=runtime.Cluster(2))


def test_names_follow_pypto() -> None:
    assert pld.window is pld.tensor.window and pld.alloc_window_buffer is pld.tensor.alloc_window_buffer
    assert pld.remote_load is pld.tile.remote_load  # pld.remote_store dispatches on its source (below)
    assert pld.world_size is pld.system.world_size and pld.rank is pld.system.rank
    assert [m.name for m in pld.NotifyOp] == ["AtomicAdd", "Set"]
    assert [m.name for m in pld.WaitCmp] == ["Eq", "Ge"]
    assert [m.name for m in pld.ReduceOp] == ["Sum", "Max", "Min", "Prod"]
    assert [m.name for m in pld.AtomicType] == ["None_", "Add"]
    for name in ("allreduce", "allgather", "reduce_scatter", "all_to_all", "barrier", "put", "get"):
        assert callable(getattr(pld.tensor, name))


def test_instrumented_window_accesses_emit_the_plain_instructions() -> None:
    """The race detector's run-time forms of a local store / load of a window are TSTORE / TLOAD."""
    from nzjit.backend.comm_instrument import instrument
    from nzjit.codegen.pto import emit_pto

    low = mesh_allreduce.lower()
    inst = instrument(low.final)
    assert "comm.window_store" in str(inst) and "tile.store local 0 0 data" in str(low.final)
    assert emit_pto(inst, mesh_allreduce) == low.pto()
    assert instrument(low.final) is inst  # cached per graph


def test_instrumented_graphs_are_cached_only_while_the_original_lives() -> None:
    """The per-graph cache holds no graph alive: instrumented or untouched, the entry goes with
    the original graph (it was keyed by id() once: a recycled id could have hit a stale entry)."""
    import copy
    import gc
    import weakref

    from nzjit.backend import comm_instrument
    from nzjit.core.ir import Graph

    low = mesh_allreduce.lower()
    windows = copy.copy(low.final)  # a graph of its own, with window accesses
    plain = Graph(list(windows.params), [], [], {}, "plain")  # nothing to instrument
    inst = comm_instrument.instrument(windows)
    assert inst is not windows and comm_instrument.instrument(plain) is plain
    assert windows in comm_instrument._cache and plain in comm_instrument._cache
    gone = [weakref.ref(windows), weakref.ref(plain)]
    del windows, plain
    gc.collect()
    assert [r() for r in gone] == [None, None]
    assert "comm.window_store" in str(inst)  # the instrumented graph stands on its own


def test_remote_store_short_form_dispatches_and_tile_put_get_stage() -> None:
    """PyPTO: `pld.remote_store` is the tile form for a tile, `pld.tensor.remote_store` for a tensor;
    `pld.tile.put` / `get` take explicit Vec staging tiles."""

    @pl.kernel
    def k(
        x: pl.Tensor[[1, SIZE], pl.FP32],
        data: pl.InOut[pld.DistributedTensor[[1, SIZE], pl.FP32]],
        z: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]],
    ):
        pld.remote_store(pl.load(x, [0, 0], [1, SIZE]), data, 1, [0, 0])
        pld.remote_store(x, data, 1, [0, 0], atomic=pld.AtomicType.Add)
        stage = pl.load(x, [0, 0], [1, SIZE])
        pld.tile.put(data, 1, x, stage)
        pld.tile.get(z, 1, data, stage)

    ir = str(k.lower().ir("trace"))
    assert "comm.remote_store[atomic=False] a data 1 0 0" in ir
    assert "comm.put[shape=(1, 64) atomic=True] data 1 x 0 0 0 0" in ir
    assert "comm.put[shape=(1, 64) atomic=False] data 1 x 0 0 0 0" in ir
    assert "comm.get[shape=(1, 64)] z 1 data 0 0 0 0" in ir

    @pl.kernel
    def bad(x: pl.Tensor[[1, SIZE], pl.INT32], data: pl.InOut[pld.DistributedTensor[[1, SIZE], pl.FP32]]):
        pld.tile.put(data, 1, data, pl.load(x, [0, 0], [1, SIZE]))

    assert "pld.tile.put: the staging tile's dtype pl.INT32 is not the window's pl.FP32" in _lower_error(bad)
