"""Random NZ programs as Python source text, each with its numpy reference.

`generate(seed, index)` is a pure function of its arguments: the campaign, the tests and a
reproducer all rebuild the same program from (seed, index). A program is one module text: the
`@pl.kernel`, the inputs (a fixed data seed), the reference (plain numpy on the logical data,
mirroring the kernel's loops with Python loops) and the harness (harness.py).

Modules: program.py (`G`, `Program`, dtype tables), forms.py (offset forms, loops, window text),
fam_mm.py, fam_store.py, fam_probe.py, fam_prover.py (the families); this module assembles them.

Families (weights in FAMILIES):

- tensor_mm: tensor-level windows `w[e, n0:n0 + TN, k0:k0 + TK]` consumed by pl.matmul /
  pl.matmul_acc, out[...] = acc into an ND or an FP32 NZ output (an Acc store, NZ-20..24).
- tile_mm: pl.load(..., target_memory=pl.Mem.Mat) of NZ windows, of `w[layer]` / `w[g, e]` /
  `w[a:b]` leading-axis slices, with static or dynamic valid_shape; pl.store of the Acc tile.
- acc_store: the NZ-21 table: Acc stores into FP32 NZ targets, panels, splits, and every refusal.
- flatten: whole-tensor `pl.reshape(w, [N])` (NZ-31) read back element for element in NZ order.
- vec_ew: SPMD lanes combining Vec windows with elementwise ops (own, shared, reversed and common
  windows, lanes reading bytes other lanes store): the lane-batched path against lane order.
- prover: the offset forms where a wrong prover rule is silently wrong (fam_prover.py): unaligned
  and negative loop starts, odd divisors, symbolic steps, INT32 wraps, lane-count bounds.
- cube_tail: one-row and small-M matmuls with K and N tails (`clamp=True`), gemv, the bias row
  (TMATMUL_BIAS), ragged N tiles stored into exact-size outputs (fam_cube.py).
- tensor_lang: pl.read / pl.write, pl.tensor.dim, pl.transpose of a tile or a tensor, explicit
  carries (init_values + pl.yield_), if/else on traced values, one ending the kernel (fam_tensor.py).
- cube_batch: pl.batch_matmul of rank-3 Mat tiles, ND or NZ weights, transposed, broadcast (fam_cube.py).
- probe: one refusal of the §7 table each (or its accepted neighbour): ranks, dynamic axes,
  sub-byte and 64-bit dtypes, views, plane slices, target memory, the NZ-25 gap guard.

Offsets come from expr.py: spmd lanes, get_block_idx/num, pl.range/pl.pipeline variables with
literal or symbolic starts, products, sums, differences, `%`, `//`, pl.min/pl.max, kernel scalars,
loop-carried values. The spec's prediction (accepted or refused, and by which rule) is recorded
on the program; the classifier reports where the compiler disagrees.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from .fam_cube import fam_cube_batch, fam_cube_tail
from .fam_mm import fam_tensor_mm, fam_tile_mm
from .fam_probe import fam_probe
from .fam_prover import fam_prover
from .fam_store import fam_acc_store, fam_flatten, fam_vec_ew
from .fam_tensor import fam_tensor_lang
from .gen_vector import fam_vec_alu, fam_vec_mix
from .harness import HARNESS
from .orch_comm import fam_orch_comm  # HOOK (issue 28)
from .orch_slices import fam_orch_slices  # HOOK (issue 25)
from .program import DTYPES, G, Program, c0_of, nbytes

__all__ = ["DTYPES", "FAMILIES", "G", "Program", "c0_of", "generate", "nbytes"]


# --------------------------------------------------------------------------------- assembly
FAMILIES: dict[str, tuple[float, Callable[[G], None]]] = {
    "tensor_mm": (35, fam_tensor_mm),
    "tile_mm": (30, fam_tile_mm),
    "acc_store": (15, fam_acc_store),
    "flatten": (5, fam_flatten),
    "vec_ew": (8, fam_vec_ew),
    "probe": (15, fam_probe),
    "prover": (12, fam_prover),
    "orch_slices": (6, fam_orch_slices),  # HOOK (issue 25): orchestration views, fuzz/orch_slices.py
    "orch_comm": (
        4,
        fam_orch_comm,
    ),  # HOOK (issue 28): ranks with several kernels that talk, fuzz/orch_comm.py
}

# the vector unit's families (issue 22) live in gen_vector.py, which does not import this module
FAMILIES["vec_alu"] = (6, fam_vec_alu)
FAMILIES["vec_mix"] = (4, fam_vec_mix)
# the cube's variants (issue 23): K / N tails, ragged stores, the bias row (fam_cube.py)
FAMILIES["cube_tail"] = (6, fam_cube_tail)
# the rest of the tile language (issue 23): pl.read / write, tensor.dim, transpose, explicit carries,
# branches on traced values (one that ends the kernel too) (fam_tensor.py)
FAMILIES["tensor_lang"] = (6, fam_tensor_lang)
FAMILIES["cube_batch"] = (4, fam_cube_batch)  # pl.batch_matmul on rank-3 Mat tiles (fam_cube.py)


def generate(seed: int, index: int, family: str | None = None, exclude: Sequence[str] = ()) -> Program:
    """Program `index` of campaign `seed` (deterministic). `exclude` drops programs carrying any of
    those tags (e.g. known, reported defects) by drawing again from the same stream."""
    rnd = random.Random(f"nzjit.fuzz:{seed}:{index}")
    for _ in range(1000):
        g = G(rnd)
        fam = family or str(g.wchoice([(w, n) for n, (w, _) in FAMILIES.items()]))
        FAMILIES[fam][1](g)
        if not any(t in exclude for t in g.tags):
            break
    src = getattr(g, "own_source", None) or _source(g, seed, index, fam, rnd)  # HOOK (issue 25): a family
    # with its own module text (orch_slices: an orchestration and its own execute())
    return Program(seed, index, fam, tuple(g.tags), _expect(g), frozenset(g.refuse), src, g.unknown)


def _expect(g: G) -> str:
    if g.refuse:
        return "refuse"
    return "any" if g.unknown else "ok"


def _source(g: G, seed: int, index: int, fam: str, rnd: random.Random) -> str:
    data_seed = rnd.randrange(2**31)
    call = rnd.choices(["numpy", "omit", "device"], weights=[6, 2, 2])[0]
    if call == "omit" and ("inout" in g.tags or not g.outs):
        call = "numpy"  # an InOut parameter is always passed
    params = ", ".join(f"{n}: {a}" for n, a, _, _ in g.params)
    kbody = g.kl or ["    pass"]
    lines = [
        f'"""nzjit fuzz program {seed}_{index} (family {fam}).',
        "",
        "tags: " + " ".join(g.tags),
        "",
        "Standalone: `python this_file.py` runs the kernel on the simulated NPU and asserts the numpy",
        'reference (see the harness at the end)."""',
        "",
        "import ml_dtypes  # noqa: F401",
        "import numpy as np",
        "",
        "import runtime",
        "from nzjit import pl",
        "",
        "",
        f"@pl.kernel(target={g.target})",
        f"def kernel({params}):",
        *kbody,
        "",
        "",
        f"SEED = {data_seed}",
        f"CALL = {call!r}  # numpy: outputs given; omit: Out parameters omitted; device: DeviceTensors",
        "PARAMS = [" + ", ".join(f"({n!r}, {k!r}, {z})" for n, _, k, z in g.params) + "]",
        "OUTS = {" + ", ".join(f"{n!r}: ({s}, {npt}, {z})" for n, (s, npt, z) in g.outs.items()) + "}",
        "",
        "",
        "def inputs():",
        "    rng = np.random.default_rng(SEED)",
        "    return {" + ", ".join(f"{n!r}: {v}" for n, v in g.inputs.items()) + "}",
        "",
        "",
        "def reference(d, outs):",
        *(f"    {n} = outs[{n!r}]" for n in g.outs),
        *g.rl,
        "    return outs",
    ]
    return "\n".join(lines) + "\n" + HARNESS
