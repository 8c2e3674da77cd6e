"""`nzjit explain-layout SHAPE DTYPE [--at] [--svg]` against NZ-4, NZ-5, NZ-8 and runtime.pack_nz."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import ml_dtypes
import numpy as np
import pytest

import runtime
from nzjit.layout_picture import NzLayout, parse_dtype, parse_shape

SVG = "{http://www.w3.org/2000/svg}"


def field(out: str, name: str) -> str:
    m = re.search(rf"^  {name} *= (.*)$", out, re.M)
    assert m, out
    return m.group(1)


def ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", text)]


@pytest.mark.parametrize(
    "shape, dtype, c0, blocked, strides",
    [
        ("64x64", "int8", 32, [1, 2, 4, 16, 32], [4096, 2048, 512, 32, 1]),
        ("256x512", "INT8", 32, [1, 16, 16, 16, 32], [131072, 8192, 512, 32, 1]),
        ("4,256,512", "fp16", 16, [4, 32, 16, 16, 16], [131072, 4096, 256, 16, 1]),
        ("4x256x512", "bf16", 16, [4, 32, 16, 16, 16], [131072, 4096, 256, 16, 1]),
        ("32x64", "fp32", 8, [1, 8, 2, 16, 8], [2048, 256, 128, 8, 1]),
        ("2,3,32,32", "uint8", 32, [6, 1, 2, 16, 32], [1024, 1024, 512, 32, 1]),  # NZ-28 fold
    ],
)
def test_blocked_shape_strides_and_c0(cli, shape, dtype, c0, blocked, strides):
    r = cli("explain-layout", shape, dtype)
    assert r.code == 0, r.err
    assert field(r.out, "c0").startswith(f"{c0} elements")
    assert ints(field(r.out, "blocked shape").split("=")[0]) == blocked
    assert "[B, C/c0, R/16, 16, c0]" in r.out
    assert ints(field(r.out, "strides").split("elements")[0]) == strides
    dt = parse_dtype(dtype).np_dtype
    assert blocked == list(runtime.nz_blocked_shape(parse_shape(shape), dt))
    assert c0 == runtime.c0_of(dt)
    itemsize = dt.itemsize
    assert ints(re.search(r"^ += (\[.*\]) bytes$", r.out, re.M).group(1)) == [s * itemsize for s in strides]


def nz8(shape, c0, index):
    """NZ-8, written out independently of nzjit: b*C*R + (c//c0)*R*c0 + (r//16)*16*c0 + (r%16)*c0 + c%c0."""
    R, C = shape[-2:]
    lead = shape[:-2]
    b = int(np.ravel_multi_index(index[:-2], lead)) if lead else 0
    r, c = index[-2:]
    return b * C * R + (c // c0) * R * c0 + (r // 16) * 16 * c0 + (r % 16) * c0 + c % c0


@pytest.mark.parametrize(
    "shape, dtype, index",
    [
        ("64x64", "int8", (0, 0)),
        ("64x64", "int8", (40, 40)),
        ("64x64", "int8", (63, 63)),
        ("64x64", "int8", (15, 32)),
        ("64x64", "int8", (16, 31)),
        ("256x512", "int8", (40, 70)),
        ("4,256,512", "fp16", (2, 40, 70)),
        ("4,256,512", "fp16", (3, 255, 511)),
        ("48x40", "fp32", (47, 9)),
        ("2,3,32,32", "bf16", (1, 2, 17, 30)),
    ],
)
def test_at_lands_where_nz8_says(cli, shape, dtype, index):
    r = cli("explain-layout", shape, dtype, "--at", ",".join(map(str, index)))
    assert r.code == 0, r.err
    logical = parse_shape(shape)
    dt = parse_dtype(dtype).np_dtype
    c0 = runtime.c0_of(dt)
    expect = nz8(logical, c0, index)
    offset = int(re.search(r"flat element offset = .* = (\d+)   \(NZ-8\)", r.out).group(1))
    assert offset == expect
    # and the host packer agrees: the one marked element is at that offset of the packed bytes
    a = np.zeros(logical, dt)
    a[index] = 1
    assert list(
        np.flatnonzero(
            runtime.pack_nz(a).reshape(-1).view(np.uint8 if dt.itemsize == 1 else f"u{dt.itemsize}")
        )
    ) == [expect]
    byte = int(re.search(r"byte offset *= \d+ \* \d+ = (\d+)", r.out).group(1))
    assert byte == expect * dt.itemsize
    r_, c_ = index[-2:]
    blocked = ints(re.search(r"\[b, c//c0, r//16, r%16, c%c0\] = (\[.*\])", r.out).group(1))
    assert blocked[1:] == [c_ // c0, r_ // 16, r_ % 16, c_ % c0]
    fractal = int(re.search(r"= fractal #(\d+)", r.out).group(1))
    assert fractal == expect // (16 * c0)
    assert f"* = fractal #{fractal}" in r.out  # marked in the picture


def test_at_with_two_coordinates_on_a_batched_shape_means_batch_0(cli):
    a = cli("explain-layout", "3,64,64", "int8", "--at", "40,40").out
    b = cli("explain-layout", "3,64,64", "int8", "--at", "0,40,40").out
    assert "flat element offset = 0*4096 + 1*2048 + 2*512 + 8*32 + 8*1 = 3336" in a and a == b


def test_ascii_picture_numbers_every_fractal_in_memory_order(cli):
    r = cli("explain-layout", "64x64", "int8")
    rows = re.findall(r"^r (\d+)-(\d+) +\|(.*)\|$", r.out, re.M)
    assert [(int(a), int(b)) for a, b, _ in rows] == [(0, 15), (16, 31), (32, 47), (48, 63)]
    grid = [[int(x) for x in cells.split("|")] for _, _, cells in rows]
    # column blocks outside, row fractals inside: fractal (row i, column block j) is j * 4 + i
    assert grid == [[j * 4 + i for j in range(2)] for i in range(4)]
    assert "column blocks outside, row fractals inside" in r.out


def test_ascii_picture_summarises_big_shapes(cli):
    r = cli("explain-layout", "1024x4096", "int8")
    assert r.code == 0
    assert "summarised: 128 column blocks x 64 row fractals" in r.out
    assert "..." in r.out
    last = re.findall(r"^r 1008-1023 +\|(.*)\|$", r.out, re.M)[0].split("|")
    assert int(last[-1]) == 128 * 64 - 1  # the very last fractal is still numbered exactly
    assert max(len(line) for line in r.out.splitlines()) < 160


def svg_of(cli, tmp_path, *args):
    out = tmp_path / "nz.svg"
    r = cli("explain-layout", *args, "--svg", out)
    assert r.code == 0, r.err
    assert f"wrote {out}" in r.out
    return ET.parse(out).getroot()  # valid XML or this raises


def test_svg_has_one_rect_per_fractal(cli, tmp_path):
    root = svg_of(cli, tmp_path, "64x64", "int8")
    assert root.tag == f"{SVG}svg"
    rects = root.findall(f".//{SVG}rect")
    assert len(rects) == 2 * 4  # [1, 2, 4, 16, 32]: 2 column blocks x 4 row fractals, no frame rect
    assert all(r.get("class") == "fractal" for r in rects)
    by_order = {int(r.get("data-order")): r for r in rects}
    assert sorted(by_order) == list(range(8))
    for n, r in by_order.items():  # memory order n is column block n // 4, row fractal n % 4
        assert (int(r.get("data-col-block")), int(r.get("data-row-fractal"))) == (n // 4, n % 4)
    labels = {t.text for t in root.findall(f".//{SVG}text")}
    assert {str(n) for n in range(8)} <= labels
    # drawn where it sits logically: down a column block, then the next column to the right
    x = lambda n: float(by_order[n].get("x"))
    y = lambda n: float(by_order[n].get("y"))
    assert x(0) == x(3) < x(4) and y(0) < y(1) < y(2) < y(3) and y(4) == y(0)
    paths = root.findall(f".//{SVG}path")
    assert len([p for p in paths if p.get("class") == "order"]) == 2  # one arrow down each column block
    assert len([p for p in paths if p.get("class") == "jump"]) == 1  # block 0 -> block 1


def test_svg_batched_and_marked(cli, tmp_path):
    root = svg_of(cli, tmp_path, "2x64x64", "fp16", "--at", "1,40,20")
    rects = root.findall(f".//{SVG}rect")
    assert len(rects) == 2 * 4 * 4
    assert sorted(int(r.get("data-order")) for r in rects) == list(range(32))
    assert len(root.findall(f".//{SVG}circle")) == 1  # the --at element


def test_svg_refuses_too_many_fractals(cli, tmp_path):
    out = tmp_path / "big.svg"
    r = cli("explain-layout", "2048x4096", "int8", "--svg", out)  # 128 x 128 = 16384 fractals
    assert r.code == 1
    assert "16384 fractals" in r.err and "at most 4096" in r.err
    assert not out.exists()
    assert NzLayout((1024, 2048), parse_dtype("int8")).n_fractals == 4096
    assert svg_of(cli, tmp_path, "1024x2048", "int8") is not None  # exactly at the cap


@pytest.mark.parametrize(
    "args, code, phrase",
    [
        (["250x512", "int8"], 1, "multiple of 16"),
        (["64x40", "int8"], 1, "multiple of c0 = 32"),
        (["64x64", "int4"], 1, "sub-byte dtype"),
        (["64x64", "int64"], 1, "has no NZ layout"),
        (["64", "int8"], 1, "rank >= 2"),
        (["64x64", "int8", "--at", "64,0"], 1, "outside shape"),
        (["64x64", "int8", "--at", "1,2,3"], 1, "needs 2"),
        (["64x64", "float128"], 2, "unknown dtype"),
        (["64xq", "int8"], 2, "cannot read shape"),
        (["64x64", "int8", "--at", "a,b"], 2, "cannot read element index"),
    ],
)
def test_refusals(cli, args, code, phrase):
    r = cli("explain-layout", *args)
    assert r.code == code
    assert r.err.startswith("nzjit explain-layout: error: ") and phrase in r.err
    assert "Traceback" not in r.err


@pytest.mark.parametrize(
    "text, name",
    [
        ("int8", "INT8"),
        ("INT8", "INT8"),
        ("pl.FP16", "FP16"),
        ("float16", "FP16"),
        ("bfloat16", "BF16"),
        ("f32", "FP32"),
        ("fp8e4m3", "FP8E4M3"),
    ],
)
def test_dtype_spellings(text, name):
    assert parse_dtype(text).name == name


def test_fp8_c0():
    assert NzLayout((16, 32), parse_dtype("fp8e5m2")).c0 == 32 == runtime.c0_of(ml_dtypes.float8_e5m2)


@pytest.mark.parametrize(
    "shape, dtype",
    [("16x32", "int8"), ("64x64", "int8"), ("2x64x64", "fp16"), ("16x8", "fp32"), ("256x512", "bf16")],
)
def test_svg_text_fits_the_picture(cli, tmp_path, shape, dtype):
    """Issue 26: the title of a small shape (64x64) was cut at the picture's right edge. Every text
    box, measured with the monospace advance, lies inside the width and above the grid."""
    from nzjit.layout_picture import text_width

    root = svg_of(cli, tmp_path, shape, dtype)
    width = float(root.get("width"))
    assert root.get("viewBox") == f"0 0 {root.get('width')} {root.get('height')}"
    header = [t for t in root.findall(f".//{SVG}text") if t.get("class") == "header"]
    assert len(header) == 3 and header[0].text.startswith(f"NZ {dtype}")
    first_rect_y = min(float(r.get("y")) for r in root.findall(f".//{SVG}rect"))
    for t in root.findall(f".//{SVG}text"):
        size = float(t.get("font-size", root.get("font-size")))
        x = float(t.get("x"))
        w = text_width(t.text, size)
        left = {"middle": x - w / 2, "end": x - w}.get(t.get("text-anchor"), x)
        assert 0 <= left and left + w <= width, (t.text, left, w, width)
    for t in header:
        assert float(t.get("y")) + 4 < first_rect_y - 20  # above the column labels and the grid


def test_svg_renders_uncut_with_rsvg(cli, tmp_path):
    """Where rsvg-convert is installed: the 64x64 picture renders at its own size (checked from the
    PNG header), i.e. the width the text needs."""
    import shutil
    import struct
    import subprocess

    if shutil.which("rsvg-convert") is None:
        pytest.skip("rsvg-convert not installed")
    root = svg_of(cli, tmp_path, "64x64", "int8")
    png = tmp_path / "nz.png"
    subprocess.run(["rsvg-convert", str(tmp_path / "nz.svg"), "-o", str(png)], check=True, timeout=60)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", data[16:24])
    assert (w, h) == (int(float(root.get("width"))), int(float(root.get("height"))))
    assert w >= 400  # the header's longest line needs ~410 px at 11 px monospace
