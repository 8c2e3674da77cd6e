"""The IR's value objects: equations are immutable and compared by identity; Sources are shared."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from nzjit.core import dtypes as dt
from nzjit.core.ir import Eqn, Literal, Var
from nzjit.core.types import ScalarType
from nzjit.errors import Source, source_of
from nzjit.prims import add_p


def _eqn() -> Eqn:
    i = ScalarType(dt.INDEX)
    a, out = Var(i, "a"), Var(i, "out")
    return Eqn(add_p, (a, Literal(1, i)), (out,), {"arity": (1, 1)}, Source("k.py", 3, 4, 9))


def test_an_equation_cannot_be_changed_after_it_is_built():
    e = _eqn()
    for field in dataclasses.fields(Eqn):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(e, field.name, None)
    assert [f.name for f in dataclasses.fields(Eqn)] == ["primitive", "inputs", "outputs", "params", "source"]


def test_equations_are_equal_only_to_themselves():
    e = _eqn()
    twin = Eqn(e.primitive, e.inputs, e.outputs, e.params, e.source)
    assert e == e and e != twin and len({e, twin}) == 2


def test_replace_keeps_every_other_field():
    e = _eqn()
    r = e.replace(source=None)
    assert (r.primitive, r.inputs, r.outputs, r.params, r.source) == (
        e.primitive,
        e.inputs,
        e.outputs,
        e.params,
        None,
    )
    assert Eqn(add_p, (), (), {}).source is None  # the default


def _caller_source() -> Source:
    return source_of(sys._getframe(1))


def test_one_kernel_position_gives_one_shared_source():
    # An unrolled kernel line runs the same instruction many times: its Source is built once.
    a, b = [_caller_source() for _ in range(2)]
    assert a is b
    assert (a.file, a.text[a.col : a.end_col]) == (__file__, "_caller_source()")
    c = _caller_source()  # another instruction: its own Source, with its own line and columns
    assert c is not a and c.line != a.line and c.text[c.col : c.end_col] == "_caller_source()"


def test_the_same_function_in_two_files_keeps_its_own_file(tmp_path):
    # Code objects compare equal across files; a shared Source must still name the right one.
    body = (
        "import sys\nfrom nzjit.errors import source_of\ndef f():\n    return source_of(sys._getframe(0))\n"
    )
    sources = []
    for name in ("one.py", "two.py"):
        path = tmp_path / name
        path.write_text(body)
        ns: dict = {}
        exec(compile(body, str(path), "exec"), ns)
        sources.append(ns["f"]())
    assert [s.file for s in sources] == [str(tmp_path / "one.py"), str(tmp_path / "two.py")]
