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


def test_agree_takes_each_choice_in_the_number_of_its_count():
    text = "{n:,} [events were|event was] dropped; [their|its] ids [are|is] kept"
    assert fmt.agree(text.format(n=1), 1) == "1 event was dropped; its ids is kept"
    assert fmt.agree(text.format(n=0), 0) == "0 events were dropped; their ids are kept"
    assert fmt.agree(text.format(n=2_000), 2_000) == "2,000 events were dropped; their ids are kept"
    assert fmt.agree("no choice [here] or [a|b|c]", 1) == "no choice [here] or [a|b|c]"  # not `[many|one]`: kept
