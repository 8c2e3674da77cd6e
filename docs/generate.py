"""Regenerate every generated page of docs/ (after a merge, or after adding an op or a rule):

python docs/generate.py            # rule-map.md, ops.md, errors.md, vector-ops.md's audit table
python docs/generate.py --check    # exit 1 if any is stale (what the tests check)
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import error_catalogue  # noqa: E402
import op_reference  # noqa: E402
import rule_map  # noqa: E402
import vector_audit  # noqa: E402

if __name__ == "__main__":
    sys.exit(max(m.main(sys.argv[1:]) for m in (rule_map, op_reference, error_catalogue, vector_audit)))
