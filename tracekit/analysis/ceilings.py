"""What each GPU can do at most: dense peak throughput per dtype and memory bandwidth.

Figures are per device as PyTorch sees it, from vendor datasheets (`docs/roofline.md`
lists the sources): dense math, never the "with sparsity" figures (NVIDIA's datasheets
print sparse numbers with an asterisk; the dense ones are half). An MI250 / MI250X
package holds two GCDs that PyTorch shows as two devices, so its figures are halved.

Devices are matched from the trace's `deviceProperties` name (`match_device`); A100 40
vs 80 GB is told by the name or by `totalGlobalMem`; ROCm traces that only say
"AMD Radeon Graphics" are matched by compute-unit count. Anything else gets null
ceilings and a note: give `peak_tflops=` / `peak_gbps=` (or a ceilings file, see
`load_ceilings_file`) to place it on the roofline.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.errors import UsageError

COMPUTE_KEYS = ("fp32", "fp32_matrix", "tf32", "bf16", "fp16", "fp8")
CEILINGS_SCHEMA: dict[str, pl.DataType] = {
    "device": pl.Int64, "device_name": pl.String, "product": pl.String, "matched_by": pl.String,
    **{k: pl.Float64 for k in COMPUTE_KEYS}, "hbm_gbps": pl.Float64,
}


@dataclass(frozen=True)
class Ceilings:
    """Dense peaks in TFLOP/s per dtype and memory bandwidth in GB/s (10^9 bytes/s)."""

    product: str
    fp32: float | None  # FP32 on CUDA cores / vector ALUs (no tensor cores)
    tf32: float | None
    bf16: float | None
    fp16: float | None
    fp8: float | None
    hbm_gbps: float | None
    fp32_matrix: float | None = None  # AMD matrix cores run FP32 GEMMs at this rate
    source: str = ""

    def row(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in (*COMPUTE_KEYS, "hbm_gbps")}


def _nv(product: str, fp32: float, tf32: float | None, bf16: float, fp8: float | None, gbps: float,
        source: str) -> Ceilings:
    return Ceilings(product, fp32, tf32, bf16, bf16, fp8, gbps, source=source)


def _amd(product: str, fp32: float, matrix: float, tf32: float | None, bf16: float, fp8: float | None,
         gbps: float, source: str) -> Ceilings:
    return Ceilings(product, fp32, tf32, bf16, bf16, fp8, gbps, fp32_matrix=matrix, source=source)


V100_NOTE = "V100 datasheet; no BF16/TF32 tensor cores (BF16 listed at the FP32 rate)"
PRODUCTS: dict[str, Ceilings] = {
    "v100_sxm2": Ceilings("V100 SXM2", 15.7, None, 15.7, 125.0, None, 900.0, source=V100_NOTE),
    "v100_pcie": Ceilings("V100 PCIe", 14.0, None, 14.0, 112.0, None, 900.0, source=V100_NOTE),
    "v100s_pcie": Ceilings("V100S PCIe", 16.4, None, 16.4, 130.0, None, 1134.0, source=V100_NOTE),
    "a100_sxm_40": _nv("A100 SXM 40GB", 19.5, 156.0, 312.0, None, 1555.0, "A100 datasheet"),
    "a100_sxm_80": _nv("A100 SXM 80GB", 19.5, 156.0, 312.0, None, 2039.0, "A100 datasheet"),
    "a100_pcie_40": _nv("A100 PCIe 40GB", 19.5, 156.0, 312.0, None, 1555.0, "A100 datasheet"),
    "a100_pcie_80": _nv("A100 PCIe 80GB", 19.5, 156.0, 312.0, None, 1935.0, "A100 datasheet"),
    "h100_sxm": _nv("H100 SXM", 67.0, 494.5, 989.5, 1979.0, 3350.0, "H100 datasheet"),
    "h100_pcie": _nv("H100 PCIe", 51.0, 378.0, 756.5, 1513.0, 2000.0, "H100 datasheet"),
    "h100_nvl": _nv("H100 NVL", 60.0, 417.5, 835.5, 1670.5, 3900.0, "H100 datasheet"),
    "h200": _nv("H200 SXM", 67.0, 494.5, 989.5, 1979.0, 4800.0, "H200 datasheet"),
    "h200_nvl": _nv("H200 NVL", 60.0, 417.5, 835.5, 1670.5, 4800.0, "H200 datasheet"),
    "h800_sxm": _nv("H800 SXM", 67.0, 494.5, 989.5, 1979.0, 3350.0, "H800 datasheet"),
    "h800_pcie": _nv("H800 PCIe", 51.0, 378.0, 756.5, 1513.0, 2000.0, "H800 datasheet"),
    "b200": _nv("B200 (HGX)", 75.0, 1100.0, 2250.0, 4500.0, 7700.0, "HGX B200 datasheet"),
    "l4": _nv("L4", 30.3, 60.0, 121.0, 242.5, 300.0, "L4 datasheet"),
    "l40s": _nv("L40S", 91.6, 183.0, 362.05, 733.0, 864.0, "L40S datasheet"),
    "mi210": _amd("MI210", 22.6, 45.3, None, 181.0, None, 1638.4, "MI210 datasheet"),
    "mi250_gcd": _amd("MI250 (one GCD)", 22.65, 45.25, None, 181.05, None, 1638.4,
                      "MI250 datasheet, package figures halved per GCD"),
    "mi250x_gcd": _amd("MI250X (one GCD)", 23.95, 47.85, None, 191.5, None, 1638.4,
                       "MI250X datasheet, package figures halved per GCD"),
    "mi300x": _amd("MI300X", 163.4, 163.4, 653.7, 1307.4, 2614.9, 5300.0, "MI300X datasheet"),
}

# (pattern on the device name, product key); the first match wins. `A100` is resolved below.
NAME_RULES: tuple[tuple[str, str], ...] = (
    (r"V100S", "v100s_pcie"), (r"V100.*PCI", "v100_pcie"), (r"V100", "v100_sxm2"),
    (r"H100.*NVL", "h100_nvl"), (r"H100.*PCI", "h100_pcie"), (r"H100", "h100_sxm"),
    (r"H200.*NVL", "h200_nvl"), (r"H200", "h200"),
    (r"H800.*PCI", "h800_pcie"), (r"H800", "h800_sxm"),
    (r"(?<![A-Z])B200", "b200"), (r"\bL40S\b", "l40s"), (r"\bL4\b", "l4"),
    (r"MI210", "mi210"), (r"MI250X(?!\s*/)", "mi250x_gcd"), (r"MI250(?!X)", "mi250_gcd"),
    (r"MI300X", "mi300x"),
)
# ROCm names a device "AMD Radeon Graphics" when it lacks the marketing name: compute units.
AMD_BY_CUS: dict[int, str] = {104: "mi250_gcd", 110: "mi250x_gcd", 304: "mi300x"}


def match_device(name: str | None, *, total_global_mem: int | None = None,
                 num_sms: int | None = None) -> tuple[Ceilings, str] | None:
    """(ceilings, how matched: `name` | `name+memory` | `compute units`) or None if unknown."""
    text = (name or "").upper()
    if "A100" in text:
        pcie = "PCI" in text
        big = "80G" in text or (total_global_mem or 0) > 48 * 10**9
        how = "name" if "80G" in text or "40G" in text else "name+memory"
        return PRODUCTS[f"a100_{'pcie' if pcie else 'sxm'}_{80 if big else 40}"], how
    if "MI250X" in text and "/" in text and num_sms in (104, 110):  # "MI250X / MI250"
        return PRODUCTS[AMD_BY_CUS[num_sms]], "name+compute units"
    for pattern, key in NAME_RULES:
        if re.search(pattern, text):
            return PRODUCTS[key], "name"
    if re.search(r"AMD|RADEON|GFX", text) and num_sms in AMD_BY_CUS:
        return PRODUCTS[AMD_BY_CUS[num_sms]], "compute units"
    return None


def override(ceilings: Ceilings | None, *, peak_tflops: float | Mapping[str, float] | None = None,
             peak_gbps: float | None = None) -> Ceilings | None:
    """Ceilings with the user's figures on top. A single `peak_tflops` sets every dtype;
    a mapping (`{"bf16": 989.5, "fp32": 67}`) sets only the dtypes it names."""
    if peak_tflops is None and peak_gbps is None:
        return ceilings
    base = ceilings or Ceilings("user-supplied", None, None, None, None, None, None)
    if isinstance(peak_tflops, Mapping):
        unknown = set(peak_tflops) - set(COMPUTE_KEYS)
        if unknown:
            raise UsageError(f"unknown dtype(s) in peak_tflops: {sorted(unknown)}; use {list(COMPUTE_KEYS)}")
        changes: dict[str, float | None] = {k: float(v) for k, v in peak_tflops.items()}
    elif peak_tflops is not None:
        changes = dict.fromkeys(COMPUTE_KEYS, float(peak_tflops))
    else:
        changes = {}
    if peak_gbps is not None:
        changes["hbm_gbps"] = float(peak_gbps)
    bad = [k for k, v in changes.items() if v is not None and not v > 0]
    if bad:
        raise UsageError(f"ceilings must be positive numbers: {bad}")
    return replace(base, **changes, source=(base.source + "; " if base.source else "") + "user override")


def device_ceilings(devices: pl.DataFrame, *, device_ids: list[int] | None = None,
                    peak_tflops: float | Mapping[str, float] | None = None,
                    peak_gbps: float | None = None) -> tuple[pl.DataFrame, list[str]]:
    """One row per device (CEILINGS_SCHEMA) plus notes for devices without ceilings.

    `device_ids` adds devices seen in GPU events but absent from `deviceProperties`.
    """
    props = {r["id"]: r for r in devices.iter_rows(named=True)}
    ids = sorted(set(props) | set(device_ids or []))
    rows, notes = [], []
    for dev in ids:
        p = props.get(dev, {})
        name = p.get("name")
        found = match_device(name, total_global_mem=p.get("total_global_mem"), num_sms=p.get("num_sms"))
        ceil, how = found if found else (None, None)
        ceil = override(ceil, peak_tflops=peak_tflops, peak_gbps=peak_gbps)
        if peak_tflops is not None or peak_gbps is not None:
            how = f"{how}+override" if how else "override"
        if ceil is None or None in (ceil.hbm_gbps, ceil.fp32):
            notes.append(f"device {dev} ({name or 'unnamed'}) has no complete ceilings in tracekit's table: "
                         "give peak_tflops=/peak_gbps= (CLI: --peak-tflops/--peak-gbps or --ceilings FILE) "
                         "to get % of ceiling")
        values = ceil.row() if ceil else dict.fromkeys((*COMPUTE_KEYS, "hbm_gbps"))
        rows.append({"device": dev, "device_name": name, "product": ceil.product if ceil else None,
                     "matched_by": how, **values})
    return pl.DataFrame(rows, schema=CEILINGS_SCHEMA), notes


def load_ceilings_file(path: str | Path) -> dict[str, Any]:
    """Read `peak_tflops` (a number, or a table of dtype -> TFLOP/s) and `peak_gbps` from a
    TOML or JSON file; returns keyword arguments for `roofline()`. This is the I/O part."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        data = json.loads(text) if p.suffix.lower() == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read ceilings file: {exc}", path=str(p)) from exc
    if not isinstance(data, dict):
        raise UsageError("ceilings file must hold a table/object", path=str(p))
    unknown = set(data) - {"peak_tflops", "peak_gbps", "name"}
    if unknown:
        raise UsageError(f"unknown keys {sorted(unknown)}; expected peak_tflops, peak_gbps", path=str(p))
    out = {k: data[k] for k in ("peak_tflops", "peak_gbps") if k in data}
    try:
        override(None, **out)  # validates
    except (TypeError, ValueError) as exc:
        raise UsageError(f"ceilings must be numbers (TFLOP/s, GB/s): {exc}", path=str(p)) from exc
    return out
