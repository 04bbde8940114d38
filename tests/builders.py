"""Build Kineto-shaped traces in code, with times given in integer nanoseconds.

Times are written to the JSON as exact decimal microseconds (`1234.567`), so a test can
assert exact nanoseconds after loading. A launch helper writes the runtime call, the
kernel and the `ac2g` flow pair, linked by correlation and External id, like Kineto does.

    b = TraceBuilder()
    step = b.annotation("ProfilerStep#1", 0, 100_000)
    ext = b.op("aten::mm", 1_000, 20_000)
    b.launch_kernel("sm90_xmma_gemm_bf16", launch_ns=2_000, launch_dur_ns=5_000,
                    start_ns=10_000, dur_ns=30_000, ext=ext)
    trace = b.load(tmp_path)
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

BATCH_GEMM = (  # a bf16 tensor-core GEMM name as cuBLAS writes it on H100
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
    "_warpgroupsize1x1x1_execute_segment_k_off_kernel"
)
H100 = {
    "id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936, "computeMajor": 9,
    "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132,
    "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472,
}
A100 = {
    "id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85899345920, "computeMajor": 8,
    "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 108,
    "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 166912, "sharedMemPerMultiprocessor": 167936,
}

_NUM = re.compile(r'"@num:(-?\d+(?:\.\d+)?)"')


class Us:
    """A time in ns written to JSON as exact decimal microseconds."""

    def __init__(self, ns: int) -> None:
        self.ns = int(ns)

    def text(self) -> str:
        sign = "-" if self.ns < 0 else ""
        a = abs(self.ns)
        whole, frac = divmod(a, 1000)
        return f"{sign}{whole}" if frac == 0 else f"{sign}{whole}.{frac:03d}"


def _default(o: Any) -> Any:
    if isinstance(o, Us):
        return "@num:" + o.text()
    raise TypeError(type(o))


def to_json(obj: Any) -> str:
    """JSON text (one key per line) with `Us` times written as exact decimal microseconds."""
    return _NUM.sub(lambda m: m.group(1), json.dumps(obj, default=_default, indent=1))


class TraceBuilder:
    def __init__(
        self,
        *,
        pid: int = 1000,
        tid: int = 1000,
        devices: list[dict[str, Any]] | None = None,
        base_time_ns: int | None = None,
        extra_top: dict[str, Any] | None = None,
    ) -> None:
        self.pid, self.tid = pid, tid
        self.events: list[dict[str, Any]] = []
        self.devices = [H100] if devices is None else devices
        self.base_time_ns = base_time_ns
        self.extra_top = extra_top or {}
        self._ext = 0
        self._corr = 1000

    # -- ids --------------------------------------------------------------------------
    def next_ext(self) -> int:
        self._ext += 1
        return self._ext

    def next_corr(self) -> int:
        self._corr += 1
        return self._corr

    # -- CPU side ---------------------------------------------------------------------
    def op(self, name: str, ts_ns: int, dur_ns: int, *, cat: str = "cpu_op", tid: int | None = None,
           ext: int | None = None, args: dict[str, Any] | None = None) -> int:
        """A CPU slice (cpu_op by default); returns its External id."""
        ext = self.next_ext() if ext is None else ext
        a = {"External id": ext, **(args or {})}
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": self.pid,
                            "tid": self.tid if tid is None else tid, "ts": Us(ts_ns), "dur": Us(dur_ns), "args": a})
        return ext

    def annotation(self, name: str, ts_ns: int, dur_ns: int, *, tid: int | None = None, gpu: bool = False,
                   device: int = 0, stream: int = 7) -> int:
        """A record_function range (user_annotation); with gpu=True also its GPU twin."""
        ext = self.op(name, ts_ns, dur_ns, cat="user_annotation", tid=tid)
        if gpu:
            self.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": device,
                                "tid": stream, "ts": Us(ts_ns), "dur": Us(dur_ns), "args": {"External id": ext}})
        return ext

    def runtime(self, name: str, ts_ns: int, dur_ns: int, *, ext: int | None = None, corr: int | None = None,
                tid: int | None = None, cat: str = "cuda_runtime") -> int:
        corr = self.next_corr() if corr is None else corr
        args: dict[str, Any] = {"cbid": 211, "correlation": corr}
        if ext is not None:
            args["External id"] = ext
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": self.pid,
                            "tid": self.tid if tid is None else tid, "ts": Us(ts_ns), "dur": Us(dur_ns), "args": args})
        return corr

    # -- GPU side ---------------------------------------------------------------------
    def gpu(self, cat: str, name: str, ts_ns: int, dur_ns: int, *, corr: int | None, stream: int = 7,
            device: int = 0, ext: int | None = None, args: dict[str, Any] | None = None) -> None:
        a: dict[str, Any] = {"device": device, "context": 1, "stream": stream}
        if corr is not None:
            a["correlation"] = corr
        if ext is not None:
            a["External id"] = ext
        a.update(args or {})
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream,
                            "ts": Us(ts_ns), "dur": Us(dur_ns), "args": a})

    def kernel(self, name: str, ts_ns: int, dur_ns: int, *, corr: int | None = None, stream: int = 7,
               device: int = 0, ext: int | None = None, grid=(132, 1, 1), block=(128, 1, 1),
               registers: int = 32, shared_memory: int = 0, occupancy: float | None = None) -> None:
        args: dict[str, Any] = {"grid": list(grid), "block": list(block), "registers per thread": registers,
                                "shared memory": shared_memory}
        if occupancy is not None:
            args["est. achieved occupancy %"] = occupancy
        self.gpu("kernel", name, ts_ns, dur_ns, corr=corr, stream=stream, device=device, ext=ext, args=args)

    def flow(self, corr: int, launch_ts_ns: int, gpu_ts_ns: int, *, stream: int = 7, device: int = 0,
             tid: int | None = None) -> None:
        self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": self.tid if tid is None else tid,
                            "ts": Us(launch_ts_ns), "cat": "ac2g", "name": "ac2g"})
        self.events.append({"ph": "f", "id": corr, "pid": device, "tid": stream, "ts": Us(gpu_ts_ns),
                            "cat": "ac2g", "name": "ac2g", "bp": "e"})

    def launch_kernel(self, name: str, *, launch_ns: int, launch_dur_ns: int, start_ns: int, dur_ns: int,
                      ext: int | None = None, stream: int = 7, device: int = 0, api: str = "cudaLaunchKernel",
                      tid: int | None = None, **kernel_args: Any) -> int:
        """A launch call, its kernel and their flow; returns the correlation id."""
        cat = "cuda_driver" if api.startswith("cu") and not api.startswith("cuda") else "cuda_runtime"
        corr = self.runtime(api, launch_ns, launch_dur_ns, ext=ext, tid=tid, cat=cat)
        self.kernel(name, start_ns, dur_ns, corr=corr, stream=stream, device=device, ext=ext, **kernel_args)
        self.flow(corr, launch_ns, start_ns, stream=stream, device=device, tid=tid)
        return corr

    def mm_add_step(self, t0: int, gemm_dur_ns: int, gemm: str = BATCH_GEMM) -> int:
        """The kernels of one small step from t0 (ns): `aten::mm` launching a GEMM that runs
        [t0 + 10,000, + gemm_dur_ns), then `aten::add` launching an elementwise kernel that
        runs [t0 + 70,000, t0 + 75,000). Returns the add op's External id."""
        ext = self.op("aten::mm", t0 + 1_000, 20_000)
        self.launch_kernel(gemm, launch_ns=t0 + 2_000, launch_dur_ns=5_000, start_ns=t0 + 10_000,
                           dur_ns=gemm_dur_ns, ext=ext)
        ext = self.op("aten::add", t0 + 60_000, 10_000)
        self.launch_kernel("void at::native::vectorized_elementwise_kernel<4>", launch_ns=t0 + 61_000,
                           launch_dur_ns=4_000, start_ns=t0 + 70_000, dur_ns=5_000, ext=ext)
        return ext

    def launch_copy(self, kind: str, *, launch_ns: int, launch_dur_ns: int, start_ns: int, dur_ns: int,
                    nbytes: int, ext: int | None = None, stream: int = 7, api: str = "cudaMemcpyAsync",
                    memset: bool = False) -> int:
        """A memcpy (kind like 'HtoD (Pageable -> Device)') or memset and its API call."""
        corr = self.runtime(api, launch_ns, launch_dur_ns, ext=ext)
        cat, name = ("gpu_memset", "Memset (Device)") if memset else ("gpu_memcpy", f"Memcpy {kind}")
        bw = nbytes / dur_ns if dur_ns else 0.0
        self.gpu(cat, name, start_ns, dur_ns, corr=corr, stream=stream, ext=ext,
                 args={"bytes": nbytes, "memory bandwidth (GB/s)": bw})
        return corr

    def sync(self, kind: str, ts_ns: int, dur_ns: int, *, stream: int = 7, device: int = 0,
             corr: int | None = None) -> None:
        """A cuda_sync GPU-side record (Stream Sync, Event Sync, Context Sync, Stream Wait Event)."""
        self.gpu("cuda_sync", kind, ts_ns, dur_ns, corr=corr, stream=stream, device=device,
                 args={"cuda_sync_kind": kind})

    def memory(self, ts_ns: int, nbytes: int, allocated: int, reserved: int, *, device: int = 0) -> None:
        self.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": self.pid,
                            "tid": self.tid, "ts": Us(ts_ns),
                            "args": {"Total Reserved": reserved, "Total Allocated": allocated, "Bytes": nbytes,
                                     "Addr": 1 << 40, "Device Id": device, "Device Type": 1}})

    def raw(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    # -- output -----------------------------------------------------------------------
    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": self.devices}
        doc.update(self.extra_top)
        meta = [{"name": "process_name", "ph": "M", "ts": Us(0), "pid": self.pid, "tid": 0,
                 "args": {"name": "python3"}},
                {"name": "thread_name", "ph": "M", "ts": Us(0), "pid": self.pid, "tid": self.tid,
                 "args": {"name": "thread 1 (python3)"}}]
        doc["traceEvents"] = meta + self.events
        if self.base_time_ns is not None:
            doc["baseTimeNanoseconds"] = self.base_time_ns
        return doc

    def text(self) -> str:
        return to_json(self.document())

    def write(self, path: str | Path, *, gz: bool | None = None) -> Path:
        path = Path(path)
        data = self.text().encode()
        if gz if gz is not None else path.name.endswith(".gz"):
            data = gzip.compress(data, mtime=0)
        path.write_bytes(data)
        return path

    def load(self, directory: str | Path, name: str = "trace.json.gz"):
        import tracekit

        return tracekit.load(self.write(Path(directory) / name))
