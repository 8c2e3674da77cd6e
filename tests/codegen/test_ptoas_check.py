"""check_ptoas: the assembler's NZ rules by version (NZ-6, §10) and the rank agreement of a
tensor's three sites (NZ-14), on hand-made text."""

from __future__ import annotations

import pytest

import nzjit
from nzjit.codegen import PtoasError, check_ptoas
from nzjit.codegen.ptoas_check import global_tensors, version_tuple

TILE = "!pto.tile_buf<loc=mat, dtype=i8, rows=256, cols=512, blayout=col_major, slayout=row_major, fractal=512, ...>"


def function(body: str, consts: tuple[int, ...] = (0, 1, 16, 32, 512, 8192, 131072)) -> str:
    lines = [f"  %c{c} = arith.constant {c} : index" for c in consts]
    lines.append(f"  %wt = pto.alloc_tile : {TILE}")
    return "\n".join(
        ["func.func @k(%arg0: !pto.ptr<i8>, %arg1: !pto.ptr<i8>) {", *lines, body, "  return", "}"]
    )


# nz-layout.md §10, in its multi-line form
SPEC = function(f"""
%w_view = pto.make_tensor_view %arg1,
    shape = [%c1, %c16, %c16, %c16, %c32],
    strides = [%c131072, %c8192, %c512, %c32, %c1]
    {{layout = #pto.layout<nz>}} : !pto.tensor_view<?x?x?x?x?xi8>
%w_pview = pto.partition_view %w_view,
    offsets = [%c0, %c0, %c0, %c0, %c0], sizes = [%c1, %c16, %c16, %c16, %c32]
    : !pto.tensor_view<?x?x?x?x?xi8> -> !pto.partition_tensor_view<1x16x16x16x32xi8>
pto.tload ins(%w_pview : !pto.partition_tensor_view<1x16x16x16x32xi8>)
          outs(%wt : {TILE})
""")

RANK4 = function(f"""
  %w_view = pto.make_tensor_view %arg1, shape = [%c16, %c16, %c16, %c32], strides = [%c8192, %c512, %c32, %c1] {{layout = #pto.layout<nz>}} : !pto.tensor_view<?x?x?x?xi8>
  %w_pview = pto.partition_view %w_view, offsets = [%c0, %c0, %c0, %c0], sizes = [%c16, %c16, %c16, %c32] : !pto.tensor_view<?x?x?x?xi8> -> !pto.partition_tensor_view<16x16x16x32xi8>
  pto.tload ins(%w_pview : !pto.partition_tensor_view<16x16x16x32xi8>) outs(%wt : {TILE})
""")

ND = function(f"""
  %x_view = pto.make_tensor_view %arg0, shape = [%c16, %c512], strides = [%c512, %c1] {{layout = #pto.layout<nd>}} : !pto.tensor_view<?x?xi8>
  %x_pview = pto.partition_view %x_view, offsets = [%c0, %c0], sizes = [%c16, %c512] : !pto.tensor_view<?x?xi8> -> !pto.partition_tensor_view<16x512xi8>
  pto.tload ins(%x_pview : !pto.partition_tensor_view<16x512xi8>) outs(%wt : {TILE})
""")


def test_spec_text_passes_061_and_fails_060():  # §10
    check_ptoas(SPEC, version="0.61")
    nzjit.check_ptoas(SPEC)  # the public re-export, default 0.61
    with pytest.raises(PtoasError, match="layout mismatch: user-specified layout=nz but inferred=nd"):
        check_ptoas(SPEC, version="0.60")


def test_spec_text_builds_the_global_tensor_of_section_10():  # §10
    assert global_tensors(SPEC) == [
        "GlobalTensor<int8_t, Shape<1,16,16,16,32>, Stride<131072,8192,512,32,1>, Layout::NZ>"
    ]


def test_rank4_nz_view_requires_rank5():  # NZ-6
    msg = "'pto.make_tensor_view' op user-specified layout=nz requires a rank-5 view"
    with pytest.raises(PtoasError, match=msg) as info:
        check_ptoas(RANK4, version="0.61")
    assert not str(info.value).startswith(("/", "<")) and ".py:" not in str(info.value)  # file-less


def test_rank4_nz_view_before_061_is_a_layout_mismatch():  # §10
    with pytest.raises(PtoasError, match="layout mismatch: user-specified layout=nz but inferred=nd"):
        check_ptoas(RANK4, version="0.60")


def test_nd_only_text_passes_every_version():
    for v in ("0.59", "0.60", "0.61", "0.62", "1.0"):
        check_ptoas(ND, version=v)


@pytest.mark.parametrize(
    "version,old",
    [
        ("0.60", True),
        ("0.7", True),
        ("0.59.9", True),
        ("0.61", False),
        ("0.61.0", False),
        ("0.100", False),
        ("1.0", False),
        ("v0.61", False),
    ],
)
def test_versions_compare_numerically(version, old):
    assert (version_tuple(version) < (0, 61)) is old
    if old:
        with pytest.raises(PtoasError, match="inferred=nd"):
            check_ptoas(SPEC, version=version)
    else:
        check_ptoas(SPEC, version=version)


def test_bad_version_is_refused():
    with pytest.raises(ValueError, match="version"):
        check_ptoas(SPEC, version="latest")


def _mutate(old: str, new: str) -> str:
    assert old in SPEC
    return SPEC.replace(old, new, 1)


@pytest.mark.parametrize(
    "old,new,site",
    [
        # the view's type has rank 4, its shape 5
        (
            "{layout = #pto.layout<nz>} : !pto.tensor_view<?x?x?x?x?xi8>",
            "{layout = #pto.layout<nz>} : !pto.tensor_view<?x?x?x?xi8>",
            "shape has 5 dims but the type",
        ),
        # a partition with 4 offsets on a rank-5 view
        ("offsets = [%c0, %c0, %c0, %c0, %c0]", "offsets = [%c0, %c0, %c0, %c0]", "offsets 4"),
        # a partition whose result type has rank 4
        (
            "-> !pto.partition_tensor_view<1x16x16x16x32xi8>",
            "-> !pto.partition_tensor_view<16x16x16x32xi8>",
            "partition type 4",
        ),
        # the partition's view of its source type has rank 4
        (": !pto.tensor_view<?x?x?x?x?xi8> -> ", ": !pto.tensor_view<?x?x?x?xi8> -> ", "source type 4"),
    ],
)
def test_mismatched_rank_between_sites_fails(old, new, site):  # NZ-14
    text = _mutate(old, new)
    with pytest.raises(PtoasError, match="rank mismatch") as info:
        check_ptoas(text, version="0.61")
    assert site in str(info.value)


def test_undefined_value_fails():
    with pytest.raises(PtoasError, match="undefined value '%arg7'"):
        check_ptoas(SPEC.replace("make_tensor_view %arg1", "make_tensor_view %arg7"))


def test_redefinition_fails():
    with pytest.raises(PtoasError, match="redefinition of SSA value '%wt'"):
        check_ptoas(SPEC.replace("pto.tload", f"%wt = pto.alloc_tile : {TILE}\npto.tload"))


def test_use_with_another_type_fails():
    with pytest.raises(PtoasError, match="used as"):
        check_ptoas(SPEC.replace("outs(%wt : !pto.tile_buf<loc=mat", "outs(%wt : !pto.tile_buf<loc=vec"))


def test_partition_of_a_non_view_fails():
    with pytest.raises(PtoasError, match="is not a pto.make_tensor_view"):
        check_ptoas(SPEC.replace("pto.partition_view %w_view", "pto.partition_view %wt"))


def test_ptoas_error_is_a_value_error():
    assert issubclass(PtoasError, ValueError)
    from nzjit import codegen

    assert codegen.PtoasError is PtoasError
