"""The C parts are optional: without a C compiler tracekit installs, reads every trace
through its Python path and runs the analysis's passes in Python and Polars (slower on
large traces)."""

from setuptools import Extension, setup

ARROW_H = "tracekit/native/_arrow.h"  # the Arrow C data interface the C parts speak to Polars
FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"]

setup(
    ext_modules=[
        Extension("tracekit.native._scan", ["tracekit/native/_scan.c"], depends=[ARROW_H], extra_compile_args=FLAGS,
                  optional=True),
        Extension("tracekit.native._paths", ["tracekit/native/_paths.c"], depends=[ARROW_H],
                  extra_compile_args=FLAGS, optional=True),
        Extension("tracekit.native._slices", ["tracekit/native/_slices.c"], depends=[ARROW_H],
                  extra_compile_args=FLAGS, optional=True),
    ]
)
