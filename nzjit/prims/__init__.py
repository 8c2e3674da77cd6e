"""Every primitive of the IR and its type rule, one module per family:

- `scalar`: index arithmetic, comparisons, `convert`, the SPMD block index and count;
- `control`: the staged loop `for` and the staged `if` arm `cond`;
- `memory`: tensor windows and views, assignment, `tile.load` / `tile.store` / `tile.move`, tile views;
- `cube`: the matmuls (tensor and tile level), `tile.extract`, `tile.mad`, `tile.mad_acc`;
- `vector`: the vector unit - elementwise Vec tile ops (`ELEMENTWISE`), casts, the ALU with
  scalars, reductions, broadcasts, fills, tile windows, top-k pieces and cross-core moves (the
  other family tables `BINARY`, `BINARY_SCALAR`, `UNARY`, `REDUCE`, `EXPAND`; `vector.ALL`);
- `select`: the vector unit's compare and select (`tile.cmp / cmps / sel / sels`, a packed mask).
- `comm`: the communication operations of `pld` (issue 28): signals, remote loads / stores,
  put / get, the collectives, and the backend's instrumented local window store / load.

`from nzjit import prims as P` gives every `*_p`, the family tables (`SCALAR_BINARY`, `COMPARE`,
`ELEMENTWISE`, `PURE`) and the definition API of `nzjit.core.primitives` (`Primitive`,
`primitive`, `all_primitives` and the type-rule helpers), so a rule table can be keyed by `P.x_p`
and a new family can be written against one name.
"""

from __future__ import annotations

from ..core.primitives import (
    _MATMUL_OUT,
    Primitive,
    _binary_scalar,
    _check_index_operands,
    _compare,
    _elementwise,
    _fail,
    _matmul_out_dtype,
    _matmul_shape,
    _mm_operands,
    _prod,
    _scalar_dtype,
    _squeeze2,
    _static_bits,
    _tensor,
    _tile,
    all_primitives,
    primitive,
)
from . import vector
from .comm import (
    DistributedTensorType,
    comm_all_to_all_p,
    comm_allgather_p,
    comm_allreduce_p,
    comm_barrier_p,
    comm_broadcast_p,
    comm_get_p,
    comm_notify_p,
    comm_nranks_p,
    comm_put_p,
    comm_rank_p,
    comm_reduce_scatter_p,
    comm_remote_load_p,
    comm_remote_store_p,
    comm_wait_p,
    comm_window_load_p,
    comm_window_store_p,
)
from .control import cond_p, for_p
from .cube import (
    tensor_matmul_acc_p,
    tensor_matmul_p,
    tile_extract_p,
    tile_mad_acc_p,
    tile_mad_bias_p,
    tile_mad_p,
    tile_matmul_acc_p,
    tile_matmul_bias_p,
    tile_matmul_p,
)
from .memory import (
    tensor_assign_p,
    tensor_create_p,
    tensor_read_p,
    tensor_reinterpret_view_p,
    tensor_reshape_p,
    tensor_slice_p,
    tensor_view_p,
    tensor_write_p,
    tile_load_p,
    tile_move_p,
    tile_store_p,
    tile_transpose_view_p,
)
from .scalar import (
    COMPARE,
    SCALAR_BINARY,
    add_p,
    convert_p,
    eq_p,
    floordiv_p,
    ge_p,
    get_block_idx_p,
    get_block_num_p,
    gt_p,
    le_p,
    lt_p,
    max_p,
    min_p,
    mod_p,
    mul_p,
    ne_p,
    sub_p,
    tensor_dim_p,
)
from .select import cmp_p, cmps_p, sel_p, sels_p, set_validshape_p, tile_transpose_p
from .vector import (
    BINARY,
    BINARY_SCALAR,
    ELEMENTWISE,
    EXPAND,
    REDUCE,
    UNARY,
    ci_p,
    create_p,
    cvt_p,
    fillpad_p,
    full_p,
    gather_mask_p,
    gather_p,
    lrelu_p,
    move_fixpipe_p,
    mrgsort_p,
    sort32_p,
    tile_assemble_p,
    tile_cast_p,
    tile_reshape_p,
    tile_slice_p,
    tpop_from_aic_p,
    tpop_from_aiv_p,
    tpush_to_aic_p,
    tpush_to_aiv_p,
)

#: Primitives without effects: an equation of one whose results nobody reads can be dropped.
PURE: frozenset[Primitive] = frozenset({
    *SCALAR_BINARY.values(), *COMPARE.values(), convert_p, get_block_idx_p, get_block_num_p, tensor_dim_p,
    tensor_slice_p, tensor_reshape_p, tensor_view_p, tensor_reinterpret_view_p, tile_transpose_view_p,
    tensor_create_p,
})

__all__ = [
    "Primitive", "primitive", "all_primitives", "PURE", "SCALAR_BINARY", "COMPARE", "ELEMENTWISE",
    "_MATMUL_OUT", "_binary_scalar", "_check_index_operands", "_compare", "_elementwise", "_fail",
    "_matmul_out_dtype", "_matmul_shape", "_mm_operands", "_prod", "_scalar_dtype", "_squeeze2",
    "_static_bits", "_tensor", "_tile",
    "for_p", "cond_p",
    "tensor_matmul_p", "tensor_matmul_acc_p", "tile_matmul_p", "tile_matmul_acc_p", "tile_extract_p",
    "tile_mad_p", "tile_mad_acc_p", "tile_matmul_bias_p", "tile_mad_bias_p",
    "vector", "BINARY", "BINARY_SCALAR", "UNARY", "REDUCE", "EXPAND",
    "tile_cast_p", "lrelu_p", "cvt_p", "create_p", "full_p", "fillpad_p", "tpush_to_aiv_p", "tpop_from_aic_p",
    "tpush_to_aic_p", "tpop_from_aiv_p", "move_fixpipe_p", "tile_slice_p", "tile_assemble_p", "tile_reshape_p",
    "ci_p", "sort32_p", "mrgsort_p", "gather_mask_p", "gather_p", "cmp_p", "cmps_p", "sel_p", "sels_p",
    "set_validshape_p", "tile_transpose_p",
    "tensor_slice_p", "tensor_reshape_p", "tensor_view_p", "tensor_reinterpret_view_p", "tensor_assign_p", "tensor_read_p", "tensor_create_p",
    "tensor_write_p",
    "tile_load_p", "tile_store_p", "tile_move_p", "tile_transpose_view_p",
    "add_p", "sub_p", "mul_p", "floordiv_p", "mod_p", "min_p", "max_p",
    "lt_p", "le_p", "gt_p", "ge_p", "eq_p", "ne_p", "convert_p", "get_block_idx_p", "get_block_num_p", "tensor_dim_p",
    "DistributedTensorType", "comm_rank_p", "comm_nranks_p", "comm_notify_p", "comm_wait_p", "comm_remote_load_p",
    "comm_remote_store_p", "comm_put_p", "comm_get_p", "comm_allreduce_p", "comm_broadcast_p",
    "comm_reduce_scatter_p", "comm_allgather_p", "comm_all_to_all_p", "comm_barrier_p", "comm_window_store_p",
    "comm_window_load_p",
]
