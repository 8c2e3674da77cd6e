"""Ray is an optional extra (issue 25): without it nzjit imports and runs, and only RayCluster says
what to install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import sys
sys.modules["ray"] = None  # as if ray were not installed
import nzjit.distributed
import nzjit, runtime
from nzjit import pl
try:
    nzjit.distributed.RayCluster(2)
except ImportError as e:
    print("ImportError:", e)
"""


def test_without_ray_only_ray_cluster_asks_for_the_extra():
    r = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ImportError: nzjit.distributed.RayCluster needs Ray: pip install 'nzjit[ray]'"
