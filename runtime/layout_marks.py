"""NZ byte provenance: the layout is part of the value.

An NZ tensor has its logical shape and its bytes in NZ fractal order (NZ-8), so an array of
NZ bytes looks exactly like a logical one. Passing one for the other runs and gives garbage, so
the host marks the arrays whose bytes are NZ: :class:`NzArray`, a numpy array that knows its
layout, returned by ``runtime.pack_nz`` and by ``runtime.as_nz`` (bytes that are already NZ, e.g.
read from a file). A kernel's NZ parameter refuses an unmarked array, an ND parameter a marked
one (``runtime.dispatch.check_arg``).

The mark survives what keeps every fractal plane whole: a copy, indexing and slicing the leading
axes (``w[e]``, ``w[1:3]``), ``np.stack`` / ``np.concatenate`` of marked arrays along a leading
axis, pickling. Anything else (arithmetic, a cast, a reshape or transpose, a window of the plane,
``np.asarray``, which returns a base-class view) gives an unmarked array: its bytes are no longer
a known NZ image, and an NZ parameter refuses it (the safe direction: ``as_nz`` re-marks).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["NzArray", "is_nz", "layout_of", "plain", "mark_nz"]


def _plain(x: Any) -> Any:
    """`x` with every NzArray (also inside lists / tuples) seen as a plain ndarray."""
    if isinstance(x, NzArray):
        return x.view(np.ndarray)
    if isinstance(x, list | tuple):
        return type(x)(_plain(v) for v in x)
    return x


def _leading_key(key: Any, ndim: int) -> bool:
    """True when indexing with `key` keeps the last two axes whole (ints and slices on leading axes)."""
    if not isinstance(key, tuple):
        key = (key,)
    lead = ndim - 2
    for i, k in enumerate(key):
        if isinstance(k, bool | np.bool_):
            return False
        if isinstance(k, int | np.integer):
            if i >= lead:
                return False
        elif isinstance(k, slice):
            if i >= lead and k != slice(None):
                return False
        else:  # Ellipsis, None, arrays: the result's axes are not simply the leading ones
            return False
    return True


def mark_nz(a: np.ndarray) -> NzArray:
    """A marked view of `a` (no checks: `runtime.as_nz` is the checked, public form)."""
    v = a.view(NzArray)
    v._nz = True
    return v


class NzArray(np.ndarray):
    """A numpy array whose bytes are in NZ order (its shape is the logical one, NZ-32).

    Behaves as an ndarray; ``runtime.layout_marks.is_nz`` tells a marked one. Made by
    ``runtime.pack_nz`` (a packed copy) or ``runtime.as_nz`` (a view of bytes already NZ)."""

    _nz: bool

    def __array_finalize__(self, obj: Any) -> None:
        # views made by numpy (reshape, transpose, ...) are NOT known NZ images; the operations
        # that keep the planes whole set the mark explicitly
        self._nz = False

    # ---------------------------------------------------------------- what keeps the mark
    def __getitem__(self, key: Any) -> Any:
        r = np.ndarray.__getitem__(self.view(np.ndarray), key)
        if isinstance(r, np.ndarray) and self._nz and r.ndim >= 2 and _leading_key(key, self.ndim):
            return mark_nz(r)
        return r

    def copy(self, order: str = "C") -> Any:  # type: ignore[override]
        """A C-contiguous copy, marked when this array is (the bytes are the same NZ image)."""
        c = np.ndarray.copy(self.view(np.ndarray), order="C")
        return mark_nz(c) if self._nz else c

    def __copy__(self) -> Any:
        return self.copy()

    def __deepcopy__(self, memo: Any) -> Any:
        return self.copy()

    def __reduce__(self) -> Any:
        return (_rebuild, (self.view(np.ndarray).copy(), bool(self._nz)))

    def __reduce_ex__(self, protocol: Any) -> Any:
        return self.__reduce__()

    def astype(self, dtype: Any, *args: Any, **kwargs: Any) -> Any:
        """A cast: plain for another dtype (c0 changes, the NZ image with it), marked for the same."""
        r = self.view(np.ndarray).astype(dtype, *args, **kwargs)
        if self._nz and np.dtype(dtype) == self.dtype:
            return mark_nz(np.ascontiguousarray(r))
        return r

    # ---------------------------------------------------------------- what drops it
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        out = kwargs.get("out")
        if out is not None:
            kwargs["out"] = _plain(out)
        r = getattr(ufunc, method)(*_plain(inputs), **kwargs)
        if out is not None:  # in place: the caller's arrays, as given
            return out[0] if len(out) == 1 else out
        return r

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        r = func(*_plain(args), **_plain(kwargs))
        if func in (np.stack, np.concatenate) and isinstance(r, np.ndarray):
            arrays = args[0] if args else kwargs.get("arrays", ())
            axis = kwargs.get("axis", args[1] if len(args) > 1 else 0)
            if _joins_planes(func, arrays, axis, r):
                return mark_nz(r)
        elif func is np.copy and self._nz and isinstance(r, np.ndarray) and r.flags.c_contiguous:
            return mark_nz(r)
        return r

    def __repr__(self) -> str:
        return ("as_nz(" if self._nz else "") + repr(self.view(np.ndarray)) + (")" if self._nz else "")


def _rebuild(a: np.ndarray, nz: bool) -> Any:
    return mark_nz(a) if nz else a


def _joins_planes(func: Any, arrays: Any, axis: Any, r: np.ndarray) -> bool:
    """np.stack / np.concatenate of marked arrays, of one dtype, along an axis before the plane."""
    try:
        arrays = list(arrays)
        axis = int(axis)
    except (TypeError, ValueError):
        return False
    if not arrays or not all(is_nz(a) and a.dtype == r.dtype for a in arrays):
        return False
    nd = r.ndim
    ax = axis + nd if axis < 0 else axis
    return 0 <= ax < nd - 2 and r.flags.c_contiguous


def is_nz(a: object) -> bool:
    """True for an array marked NZ (``pack_nz`` output, ``as_nz``, or a leading-axis piece of one)."""
    return isinstance(a, NzArray) and a._nz


def layout_of(a: object) -> str:
    """``"NZ"`` for a marked array or an NZ DeviceTensor / StackedDeviceTensor, else ``"ND"``."""
    if isinstance(a, np.ndarray):
        return "NZ" if is_nz(a) else "ND"
    return str(getattr(a, "layout", "ND"))


def plain(a: np.ndarray) -> np.ndarray:
    """The same bytes as a plain ndarray (no mark, no copy)."""
    return a.view(np.ndarray) if isinstance(a, NzArray) else a
