"""The native scanner is optional: without a C compiler tracekit installs and reads every
trace through its Python path (slower on large traces)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracekit.loader._scan",
            ["tracekit/loader/_scan.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
