"""nzjit.fuzz: a randomized campaign over NZ programs ("never silently wrong", issue 10).

Every generated program must either equal its numpy reference or be refused
(`nzjit.CompileError` / `runtime.DispatchError`); anything else is a bug.
"""
