"""The one compiled piece, runtime._lines (the NZ line permutation behind pack_nz / unpack_nz).

Optional: where no C compiler is found the install goes on without it, and runtime.nz moves the
same bytes with numpy (about half as fast). Everything else is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("runtime._lines", ["runtime/_lines.c"], depends=["runtime/_lines_widen.c"], optional=True)
    ]
)
