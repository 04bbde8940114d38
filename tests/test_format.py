"""Number formatting shared by the reports, findings and the command line."""

from __future__ import annotations

from tracekit import format as fmt


def test_counted_takes_the_number_of_its_count():
    assert fmt.counted(1, "copy", "copies") == "1 copy"
    assert fmt.counted(0, "copy", "copies") == "0 copies"
    assert fmt.counted(2, "kernel") == "2 kernels"
    assert fmt.counted(12_345, "launch", "launches") == "12,345 launches"


def test_ns_and_pct():
    assert (fmt.ns(877), fmt.ns(40_623), fmt.ns(100_000), fmt.ns(None)) == ("877 ns", "40.6 µs", "100 µs", "–")
    assert (fmt.pct(0.620198), fmt.pct(0.85, 0)) == ("62.0 %", "85 %")
