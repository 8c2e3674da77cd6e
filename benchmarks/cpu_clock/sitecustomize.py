"""Imported at start-up by every Python process benchmarks/compare_commits.py starts with
``--clock cpu`` (this folder is put first on PYTHONPATH, which the benchmarks' own fresh processes
inherit): ``time.perf_counter`` then reads this process's CPU time, so every benchmark - of either
tree, unchanged - times the work it does rather than the machine's neighbours. Nothing else reads
perf_counter for a deadline (runtime.comm's hang timeouts use time.monotonic)."""

import os
import time

if os.environ.get("NZJIT_BENCH_CLOCK") == "cpu":
    time.perf_counter = time.process_time
