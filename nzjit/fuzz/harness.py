"""The harness appended to every generated program, so that each program file is standalone.

A generated module defines `kernel` (a @pl.kernel), `SEED`, `PARAMS`, `OUTS`, `inputs()` and
`reference(d, out)`; this text adds the checking half:

- `execute()` builds the arguments (NZ inputs packed with `runtime.pack_nz`, every output
  pre-filled with a random sentinel so a stray or missing write shows), runs the kernel, decodes
  NZ outputs with `nz_unpack` (the NZ-8 formula, written here independently of `runtime`) and
  returns (got, expected, must_refuse).
- `reference` works on logical float64 copies of the inputs, through `win` / `put`, which raise
  `MustRefuse` for a window numpy would silently truncate or wrap (out of bounds, negative): such a
  program has no reference, so the only correct outcome is a refusal. The lanes of a `pl.spmd`
  loop run as `for lane in lanes(n)`: the elements each lane reads and writes are recorded, and two
  lanes touching one element, one writing it, is a race (issue 24): `MustRefuse` as well.
- Expected values are float64; NaN marks "don't care" (e.g. output columns computed from rows
  outside a load's valid_shape, whose tile contents the hardware leaves stale).
- `main()` asserts the reference: a reproducer file is this module run with plain python.
"""

HARNESS = '''

# ------------------------------------------------------------------ harness (nzjit.fuzz)
class MustRefuse(Exception):
    """The reference has no value (out-of-bounds or negative window): only a refusal is right."""


def nz_pack(a):
    """NZ-8: element (b, r, c) at b*C*R + (c // c0)*R*c0 + r*c0 + c % c0 (independent of runtime)."""
    a = np.asarray(a)
    *lead, r, c = a.shape
    c0 = 32 // a.dtype.itemsize
    blocks = a.reshape(*lead, r, c // c0, c0)
    return np.ascontiguousarray(np.swapaxes(blocks, -3, -2)).reshape(a.shape)


def nz_unpack(a):
    """The inverse of nz_pack: NZ-ordered bytes of a logical shape -> the logical array."""
    a = np.ascontiguousarray(a)
    *lead, r, c = a.shape
    c0 = 32 // a.dtype.itemsize
    blocks = a.reshape(-1).reshape(*lead, c // c0, r, c0)
    return np.ascontiguousarray(np.swapaxes(blocks, -3, -2)).reshape(a.shape)


_LANE = [None]  # the lane of the pl.spmd loop the reference runs (None: outside any launch)
_TOUCHED = []  # (lane, "r" / "w", root array, element byte offsets) of that launch


def lanes(n):
    """range(n) for the lanes of a pl.spmd: they run concurrently, so two lanes touching one element,
    one of them writing it, race (issue 24) and the program must be refused. A launch inside a
    lane belongs to that lane."""
    if _LANE[0] is not None:
        yield from range(n)
        return
    _TOUCHED.clear()
    try:
        for lane in range(n):
            _LANE[0] = lane
            yield lane
    finally:
        _LANE[0] = None
    race = _lane_race()
    _TOUCHED.clear()
    if race:
        raise MustRefuse(race)


def _touch(view, kind):
    root = view
    while isinstance(root.base, np.ndarray):
        root = root.base
    start = view.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    offs = np.full((1,) * view.ndim, start, np.int64)
    for axis, (n, st) in enumerate(zip(view.shape, view.strides)):
        shape = [1] * view.ndim
        shape[axis] = n
        offs = offs + (np.arange(n, dtype=np.int64) * st).reshape(shape)
    _TOUCHED.append((_LANE[0], kind, root, offs.reshape(-1)))


def _lane_race():
    """The first cross-lane overlap of the launch (write-write or read-write), by brute force over
    elements: every (element, lane) pair, vectorised; '' when none."""
    roots = {}
    for lane, kind, root, offs in _TOUCHED:
        roots.setdefault(id(root), []).append((lane, kind, offs))
    for acc in roots.values():
        w = [(np.full(len(o), lane), o) for lane, k, o in acc if k == "w"]
        if not w:
            continue
        wl, wo = np.concatenate([x for x, _ in w]), np.concatenate([o for _, o in w])
        pairs = np.unique(np.stack([wo, wl]), axis=1)  # (element, lane) once each, by element
        elems, first, count = np.unique(pairs[0], return_index=True, return_counts=True)
        if (count > 1).any():
            e = int(elems[count > 1][0])
            return f"lane race: two lanes write the element at byte {e} (lanes {sorted(set(pairs[1][pairs[0] == e].tolist()))[:2]})"
        lane_of = pairs[1][first]  # the one lane writing each written element
        for lane, k, o in acc:
            if k != "r":
                continue
            pos = np.searchsorted(elems, o)
            hit = (pos < len(elems)) & (elems[np.minimum(pos, len(elems) - 1)] == o)
            other = hit & (lane_of[np.minimum(pos, len(elems) - 1)] != lane)
            if other.any():
                return f"lane race: lane {lane} reads an element another lane writes"
    return ""


def win(a, starts, sizes, _kind="r"):
    """a[window] where a size of None indexes (drops) the axis; refuses what numpy would clip."""
    idx = []
    for axis, (s, n) in enumerate(zip(starts, sizes)):
        dim, s = a.shape[axis], int(s)
        if n is None:
            if not 0 <= s < dim:
                raise MustRefuse(f"index {s} out of range for axis {axis} of extent {dim}")
            idx.append(s)
        else:
            if s < 0 or s + n > dim:
                raise MustRefuse(f"window [{s}, {s + n}) out of bounds for axis {axis} of extent {dim}")
            idx.append(slice(s, s + n))
    view = a[tuple(idx)]
    if _LANE[0] is not None and _kind and isinstance(view, np.ndarray):
        _touch(view, _kind)
    return view


def put(out, starts, sizes, value):
    """out[window] = value (leading unit axes of value squeezed); a scalar NaN marks elements
    "don't care" (the kernel does not write them: not a write of the lane)."""
    dont_care = np.ndim(value) == 0 and np.isnan(value)
    view = win(out, starts, sizes, "" if dont_care else "w")
    view[...] = value if np.ndim(value) == 0 else np.reshape(value, view.shape)


def wrap64(v):
    """INDEX arithmetic wraps at 64 bits (api.md: integers wrap at their declared width)."""
    return (int(v) + 2**63) % 2**64 - 2**63


def mm(a, b, b_trans):
    """The exact product of small integers (float64 holds every partial sum exactly)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    while a.ndim > 2:
        a = a[0]
    while b.ndim > 2:
        b = b[0]
    return a @ (b.T if b_trans else b)


def sentinel(shape, dtype, rng):
    return rng.integers(-90, 90, shape).astype(dtype)


def _device_bytes(a, nz):
    if not nz:
        return a.copy()
    try:
        return runtime.pack_nz(a)
    except ValueError:  # no NZ form (misaligned, sub-byte): hand the bytes over as they are
        return a.copy()


def execute():
    """Run the kernel on packed inputs; return (got, expected, must_refuse).

    CALL selects the calling convention: "numpy" (outputs given, pre-filled with a sentinel),
    "omit" (Out parameters omitted: allocated, holding the poison pattern, and returned) or
    "device" (every tensor a DeviceTensor resident on one Worker, outputs read back with copy_from;
    the kernel is called three times on the same tensors, the outputs reset to their first bytes
    before each call: the 2nd call of a signature records its lane-batched attempts and the
    3rd replays them, backend/lane_replay.py - the 3rd call's outputs are the ones checked).
    """
    d = inputs()
    rng = np.random.default_rng(SEED + 1)
    if CALL == "omit":  # issue-24 hook: an omitted Out is fresh device memory, the poison pattern
        init = {n: runtime.memory.poison_array(shape, dt) for n, (shape, dt, nz) in OUTS.items()}
    else:
        init = {n: sentinel(shape, dt, rng) for n, (shape, dt, nz) in OUTS.items()}
    try:
        expected = reference(d, {n: a.astype(np.float64) for n, a in init.items()})
        must_refuse = None
    except MustRefuse as e:
        expected, must_refuse = None, str(e)
    worker = runtime.Worker(0, kernel.target.value) if CALL == "device" else None
    args, bufs, resets = [], {}, []
    for name, kind, nz in PARAMS:
        if kind == "scalar":
            args.append(d[name])
            continue
        a = _device_bytes(d[name] if kind == "in" else init[name], nz)
        if kind != "in":
            if CALL == "omit":
                bufs[name] = None
                continue
            bufs[name] = a
        if worker is not None:
            first = a
            a = worker.alloc_tensor(a.shape, a.dtype, init=a)
            if kind != "in":
                bufs[name] = a
                resets.append((a, first))
        args.append(a)
    res = kernel(*args)
    for _ in range(2 if worker is not None else 0):  # record, then replay (docstring)
        for t, first in resets:
            worker.write_tensor(t, first)
        res = kernel(*args)
    if CALL == "omit":
        res = res if isinstance(res, tuple) else (res,)
        bufs = dict(zip(bufs, res))
    elif worker is not None:
        bufs = {n: worker.copy_from(t) for n, t in bufs.items()}
    got = {n: (nz_unpack(b) if OUTS[n][2] else b) for n, b in bufs.items()}
    return got, expected, must_refuse


def compare(got, expected):
    """Mismatch descriptions (empty: equal); NaN in `expected` means don't care."""
    bad = []
    for name, exp in expected.items():
        g = np.asarray(got[name]).astype(np.float64)
        care = ~np.isnan(exp)
        if g.shape != exp.shape:
            bad.append(f"{name}: shape {g.shape} != {exp.shape}")
            continue
        diff = care & (g != exp)
        if diff.any():
            first = tuple(int(i) for i in np.argwhere(diff)[0])
            bad.append(f"{name}: {int(diff.sum())} of {int(care.sum())} checked elements differ; first "
                       f"at {first}: got {g[first]!r}, expected {exp[first]!r}")
    return bad


def main():
    got, expected, must_refuse = execute()
    assert must_refuse is None, f"accepted a program whose reference refuses it: {must_refuse}"
    bad = compare(got, expected)
    assert not bad, "wrong result:\\n" + "\\n".join(bad)
    print("OK: equal to the numpy reference")


if __name__ == "__main__":
    main()
'''

#: The harness of a family whose module brings its own `execute()` (it runs an orchestration): the
#: kernel-call `execute` above is renamed `kernel_execute` (orch_slices.py, orch_comm.py)
assert HARNESS.count("\ndef execute():\n") == 1, "the kernel-call execute() the orchestration families rename"
ORCHESTRATION_HARNESS = HARNESS.replace("\ndef execute():\n", "\ndef kernel_execute():\n")
