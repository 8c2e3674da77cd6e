"""`Options` (nzjit/backend/options.py): one interned frozen value per set of switches, which must
survive pickling field for field - a Ray actor and a rank process receive a call's options
pickled (issue 25). Before the fix every unpickled Options was the defaults: the actors silently
ran with switches the caller had turned off."""

from __future__ import annotations

import pickle
from dataclasses import fields

import pytest

from nzjit.backend.options import Options


def _flipped(name: str) -> Options:
    default = getattr(Options(), name)
    value = {bool: not default, int: 3}.get(type(default), 2)  # threads: None -> 2
    return Options(**{name: value})


@pytest.mark.parametrize("name", [f.name for f in fields(Options)])
def test_every_field_survives_pickling(name):
    opts = _flipped(name)
    assert getattr(opts, name) != getattr(Options(), name)
    back = pickle.loads(pickle.dumps(opts))
    assert getattr(back, name) == getattr(opts, name)
    assert back is opts  # interned again: caches keyed by identity still hit


def test_the_defaults_and_a_mix_round_trip():
    assert pickle.loads(pickle.dumps(Options())) is Options()
    mix = Options(fast=False, batch=False, lane_group=4, threads=1, rank_batch=False)
    assert pickle.loads(pickle.dumps(mix, protocol=pickle.HIGHEST_PROTOCOL)) is mix
