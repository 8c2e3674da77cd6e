"""GlobalMemory (bytes, bounds, free, upload counting) and OnChip capacities (HW §7)."""

from __future__ import annotations

import numpy as np
import pytest

from runtime import DeviceError, GlobalMemory, OnChip
from runtime.memory import POISON_BYTE


def test_alloc_is_512_aligned_and_never_reused():
    gm = GlobalMemory()
    a = gm.alloc(100)
    b = gm.alloc(1)
    assert a % 512 == 0 and b % 512 == 0 and b >= a + 512
    gm.free(a)
    c = gm.alloc(100)
    assert c not in (a, b) and c > b


def test_read_write_round_trip_and_counters():
    gm = GlobalMemory()
    a = gm.alloc(64)
    gm.write(a, np.arange(16, dtype=np.float32))
    gm.write(a + 8, b"\x01\x02")
    assert gm.uploads == 2 and gm.upload_bytes == 66
    got = gm.read(a, 64)
    assert gm.downloads == 1
    assert got[8:10].tolist() == [1, 2]
    assert got[:8].view(np.float32).tolist() == [0, 1] and got[12:16].view(np.float32)[0] == 3


def test_view_is_strided_and_writable():
    gm = GlobalMemory()
    a = gm.alloc(256)
    v = gm.view(a, (4, 8), (64, 1))
    v[...] = 7
    data = gm.read(a, 256).reshape(4, 64)
    assert (data[:, :8] == 7).all() and (data[:, 8:] == POISON_BYTE).all()  # fresh GM: poison


@pytest.mark.parametrize(
    "shape,strides,offset",
    [
        ((1, 65), (0, 1), 0),  # one byte past the end
        ((2, 32), (64, 1), 32),  # second row past the end
        ((4,), (1,), -1),  # before the start
        ((2, 8), (-64, 1), 0),  # negative stride reaching before the start
    ],
)
def test_view_out_of_bounds_refused(shape, strides, offset):
    gm = GlobalMemory()
    a = gm.alloc(64)
    gm.alloc(64)  # a neighbour: a wrong address must not silently read it
    with pytest.raises(DeviceError, match="outside every allocation"):
        gm.view(a + offset, shape, strides)


def test_view_spanning_two_allocations_refused():
    gm = GlobalMemory()
    a = gm.alloc(512)
    gm.alloc(512)
    with pytest.raises(DeviceError):
        gm.view(a + 500, (100,), (1,))


def test_null_and_freed_addresses_refused():
    gm = GlobalMemory()
    with pytest.raises(DeviceError):
        gm.read(0, 4)
    a = gm.alloc(64)
    gm.free(a)
    with pytest.raises(DeviceError, match="use after free"):
        gm.read(a, 4)
    with pytest.raises(DeviceError, match="double free"):
        gm.free(a)
    with pytest.raises(DeviceError, match="not the base"):
        gm.free(gm.alloc(64) + 32)


def test_empty_view_touches_nothing():
    gm = GlobalMemory()
    assert gm.view(12345, (0, 4), (4, 1)).shape == (0, 4)


def test_capacities_per_target():  # HW §7
    a2 = OnChip("A2A3").capacity
    assert (a2["Vec"], a2["Mat"], a2["Left"], a2["Right"], a2["Acc"], a2["Bias"]) == (
        192 << 10,
        512 << 10,
        64 << 10,
        64 << 10,
        128 << 10,
        1 << 10,
    )
    a5 = OnChip("A5").capacity
    assert (a5["Vec"], a5["Acc"], a5["Bias"]) == (256 << 10, 256 << 10, 4 << 10)
    with pytest.raises(DeviceError):
        OnChip("A9")


def test_acc_capacity_exceeded_message():  # HW §4.3: TileAcc<float,128,256> is exactly 128 KiB
    oc = OnChip()
    full = oc.alloc_tile("Acc", 128, 256, np.float32)
    with pytest.raises(DeviceError, match=r"Acc \(L0C\) capacity exceeded: 139264 bytes live > 131072"):
        oc.alloc_tile("Acc", 16, 128, np.float32)
    oc.free_tile(full)
    oc.alloc_tile("Acc", 16, 128, np.float32)
    assert oc.live["Acc"] == 8192 and oc.peak["Acc"] == 131072


def test_a5_acc_is_larger():
    oc = OnChip("A5")
    oc.alloc_tile("Acc", 128, 256, np.float32)
    oc.alloc_tile("Acc", 128, 256, np.float32)
    with pytest.raises(DeviceError, match="L0C"):
        oc.alloc_tile("Acc", 16, 16, np.float32)


@pytest.mark.parametrize(
    "space,rows,cols,dtype,hw",
    [
        ("Left", 48, 1024, np.float16, "L0A"),
        ("Right", 1024, 48, np.float16, "L0B"),
        ("Mat", 512, 1056, np.int8, "L1"),
        ("Vec", 16, 6160, np.float16, "UB"),
    ],
)
def test_other_spaces_overflow(space, rows, cols, dtype, hw):
    with pytest.raises(DeviceError, match=rf"{space} \({hw}\) capacity exceeded"):
        OnChip().alloc_tile(space, rows, cols, dtype)


def test_tile_use_after_free_and_foreign_free():
    oc = OnChip()
    t = oc.alloc_tile("Vec", 16, 16, np.float16)
    oc.free_tile(t)
    with pytest.raises(DeviceError, match="after free"):
        t.logical()
    with pytest.raises(DeviceError, match="double free"):
        oc.free_tile(t)
    with pytest.raises(DeviceError, match="not allocated"):
        OnChip().free_tile(oc.alloc_tile("Vec", 16, 16, np.float16))
