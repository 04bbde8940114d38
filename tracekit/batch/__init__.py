"""Batch analysis of archived traces: `run_batch(sources, out_dir=...)` -> `BatchResult`.

See docs/batch.md for the sources it accepts, the tables it writes and their columns.
"""

from tracekit.batch.run import BatchResult, run_batch
from tracekit.batch.schema import CLASSES_SCHEMA, FINDINGS_SCHEMA, RANKS_SCHEMA, SUMMARY_SCHEMA

__all__ = ["run_batch", "BatchResult", "SUMMARY_SCHEMA", "CLASSES_SCHEMA", "FINDINGS_SCHEMA", "RANKS_SCHEMA"]
