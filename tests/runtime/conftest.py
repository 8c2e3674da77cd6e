"""Fixtures of the runtime tests: pack_nz / unpack_nz's two ways of moving lines."""

from __future__ import annotations

import pytest

import runtime


@pytest.fixture(params=["compiled", "numpy"])
def swap_path(request, monkeypatch):
    """Each of the two ways pack_nz / unpack_nz move lines: the compiled swap (runtime/_lines.c;
    skipped where the install could not build it) and numpy's copies (the fallback)."""
    if request.param == "numpy":
        monkeypatch.setattr(runtime.nz, "_native", None)
    elif runtime.nz._native is None:
        pytest.skip("runtime._lines was not built (no C compiler at install): only numpy's copies run")
    return request.param


@pytest.fixture
def numpy_swap(monkeypatch):
    """pack_nz / unpack_nz with numpy's copies (for tests of how those copies are cut)."""
    monkeypatch.setattr(runtime.nz, "_native", None)
