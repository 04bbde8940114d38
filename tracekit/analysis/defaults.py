"""Defaults of the analyses that a command shows before it reads anything (its options'
defaults): kept apart from the analyses so that reading them imports no Polars, and a
command's load can start first."""

DEFAULT_MIN_GAP_NS = 1_000  # gaps shorter than this are `short` (gaps.py, rule 1)
