"""A lowered graph survives pickling (issue 25: RayCluster ships it to the rank's actor): the copy
has the same text, the same registered primitives, and runs to the same bytes."""

from __future__ import annotations

import pickle

import numpy as np

import runtime
from nzjit import pl
from nzjit.backend.convention import launch_resident
from nzjit.backend.options import DEFAULT
from nzjit.core.primitives import all_primitives

E, T, N, K = 2, 16, 64, 64


@pl.kernel
def gmm(
    x: pl.Tensor[[E, T, K], pl.INT8],
    w: pl.Tensor[[E, N, K], pl.INT8, pl.NZ],
    out: pl.Out[pl.Tensor[[E, T, N], pl.INT32]],
):
    for e in pl.spmd(E):
        for nb in pl.range(N // 32):
            n0 = nb * 32
            out[e, :, n0 : n0 + 32] = pl.matmul(x[e, :, :], w[e, n0 : n0 + 32, :], b_trans=True)


def test_lowered_graph_pickles_and_runs_to_the_same_bytes():
    rng = np.random.default_rng(0)
    x = rng.integers(-4, 5, (E, T, K)).astype(np.int8)
    w = rng.integers(-4, 5, (E, N, K)).astype(np.int8)
    low = gmm.lower(x, runtime.pack_nz(w))
    gmm(x, runtime.pack_nz(w))  # run once first: whatever a run caches on the graph must pickle too
    graph = low.final
    copy = pickle.loads(pickle.dumps(graph))
    assert str(copy) == str(graph) and copy is not graph
    prims = all_primitives()
    assert all(eq.primitive is prims[eq.primitive.name] for eq in copy.eqns)  # by name: the same objects
    outs = []
    for g in (graph, copy):
        worker = runtime.Worker(0)
        args = [
            worker.alloc_tensor(x.shape, x.dtype, init=x),
            worker.alloc_tensor(w.shape, w.dtype, init=runtime.pack_nz(w)),
            worker.alloc_tensor((E, T, N), np.int32),
        ]
        launch_resident(gmm.params, g, {}, DEFAULT, worker, args)  # as a RayCluster rank runs it
        outs.append(worker.copy_from(args[2]))
    np.testing.assert_array_equal(outs[0], np.einsum("etk,enk->etn", x.astype(np.int32), w.astype(np.int32)))
    np.testing.assert_array_equal(outs[1], outs[0])
