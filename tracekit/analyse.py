"""Every analysis of one trace, run once: the bundle that reports, diffs and batches read.

`analyse(trace)` calls the pure analysis functions, sharing the expensive intermediate
frames (op tree, launch links, kernel taxonomy) between them (remembered by
`shared.sharing()`: the first analysis that needs one computes it, the others reuse it or
wait for it), and returns an `Analysis` holding each result.
Nothing here formats or prints.

The independent analyses run on two threads (`workers_for`: one when two at once could need
more than half the machine's memory; `AnalysisOptions.workers` decides instead; on large
traces the heaviest start once the critical path has let its graph go, before any analysis
not yet started). The critical path's what-ifs are computed as soon as the path is found,
and its dependency graph is then let go, before the path's contexts and summary, unless
`AnalysisOptions.keep_graph`. Nothing here changes the process's state (allocators,
collector, threads left running): the `tracekit` command sets those (`tracekit.runtime`).
"""

from __future__ import annotations

import contextvars
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import polars as pl

from tracekit.analysis import taxonomy
from tracekit.analysis.attribution import Attribution, attribute
from tracekit.analysis.breakdown import Breakdown, breakdown
from tracekit.analysis.compile import CompileStats, compile_stats
from tracekit.analysis.gaps import DEFAULT_MIN_GAP_NS, Gaps, gaps
from tracekit.analysis.launches import LaunchStats, launch_stats
from tracekit.analysis.links import cpu_ops, gpu_links, launch_ops
from tracekit.analysis.memory import MemoryStats, memory_stats
from tracekit.analysis.occupancy import occupancy_table
from tracekit.analysis.shared import sharing
from tracekit.analysis.syncs import CopyStats, SyncStats, copy_stats, sync_stats
from tracekit.analysis.timeline import Timeline, timeline
from tracekit.analysis.windows import Windows, windows
from tracekit.model import UNREAD_GPU_COLUMNS, UNREAD_OP_COLUMNS, UNREAD_RUNTIME_COLUMNS, Trace


@dataclass(frozen=True)
class AnalysisOptions:
    min_gap_ns: int = DEFAULT_MIN_GAP_NS
    findings_config: dict[str, Any] = field(default_factory=dict)
    peak_tflops: float | None = None
    peak_gbps: float | None = None
    keep_graph: bool = False  # keep `critical_path.graph` (the whole dependency graph) in the result
    workers: int | None = None  # threads for the independent analyses; None: see `workers_for`


@dataclass(frozen=True)
class Analysis:
    trace: Trace
    options: AnalysisOptions
    timeline: Timeline
    breakdown: Breakdown
    gaps: Gaps
    windows: Windows
    attribution: Attribution
    launches: LaunchStats
    syncs: SyncStats
    copies: CopyStats
    memory: MemoryStats
    compile: CompileStats
    kernels: pl.DataFrame  # taxonomy.kernel_table
    classes: pl.DataFrame  # taxonomy.class_table
    tensor_core_share: float | None
    occupancy: pl.DataFrame  # occupancy.occupancy_table
    critical_path: Any = None
    findings: Any = None
    attention: Any = None
    roofline: Any = None
    whatifs: list[Any] = field(default_factory=list)  # whatif.standard() on the critical path's graph
    notes: list[str] = field(default_factory=list)  # analyses that could not run, and why


Progress = Callable[[str, int, int], None]


def analyse(trace: Trace, *, options: AnalysisOptions | None = None, progress: Progress | None = None,
            before_findings: Callable[[Analysis], object] | None = None) -> Analysis:
    """Run every analysis on `trace` (pure: the trace is not modified).

    The analyses run inside `shared.sharing()`: the op tree, launch links and kernel
    taxonomy that several of them derive on their own are computed once.

    progress: called as `progress(name, done, total)` as each analysis ends (`name` the one
    that ended; `done` of `total` steps, the findings last), from
    the thread that ran it.
    before_findings: called once, on the calling thread, with the analysis as it stands
        when every analysis but the findings is done (`findings` None, `notes` those so
        far), just before the findings run; it should return at once (a report starts
        drawing on other threads there what does not read the findings).

    `analyse` writes nothing: `tracekit.cache.Cache().analyse(trace)` reuses a result.
    """
    opts = options or AnalysisOptions()
    with sharing():
        result = _analyse(trace, opts, _Steps(progress), before_findings)
    return result


class _Steps:
    """Counts the steps that ended and tells `progress` (thread-safe; a no-op without it)."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress
        self.total = 0
        self.done = 0
        self._lock = threading.Lock()

    def end(self, name: str) -> None:
        if self.progress is None:
            return
        with self._lock:
            self.done += 1
            self.progress(name, self.done, self.total)

    def wrap(self, tasks: dict[str, Callable[[], Any]]) -> dict[str, Callable[[], Any]]:
        return {name: partial(self._run, name, task) for name, task in tasks.items()}

    def _run(self, name: str, task: Callable[[], Any]) -> Any:
        result = task()
        self.end(name)
        return result


def _analyse(trace: Trace, opts: AnalysisOptions, steps: _Steps,
             before_findings: Callable[[Analysis], object] | None = None) -> Analysis:
    notes: dict[str, list[str]] = {name: [] for name in OPTIONAL}
    # independent analyses on `workers` threads: Polars releases the GIL while it works, so
    # the second core is used; each result is the same whatever the order. The shared
    # links (op tree, launch calls, GPU links) are computed by the first task that asks
    # (the critical path, the longest, started first) while the second thread runs the
    # analyses that do not need them; any other task that asks meanwhile waits for them.
    graph_gone = threading.Event()  # set once the critical path lets its graph go (or fails)
    tasks: dict[str, Callable[[], Any]] = {
        "critical_path": lambda: _path_and_whatifs(trace, opts, notes, graph_gone),
        # without the links
        "timeline": lambda: timeline(trace),
        "breakdown": lambda: breakdown(trace),
        "kernels": lambda: taxonomy.kernel_table(trace.gpu),
        "classes": lambda: taxonomy.class_table(trace.gpu, include_memory=True),
        "tensor_core_share": lambda: taxonomy.tensor_core_share(trace.gpu),
        "occupancy": lambda: occupancy_table(trace.gpu, trace.meta.devices),
        "step_timeline": lambda: _steps_timeline(trace),  # for the findings only (not an Analysis field)
        # with them
        "memory": lambda: memory_stats(trace),  # (keeps little: its timeline is made when read)
        **{name: partial(_optional, name, trace, opts, notes[name], {}) for name in ("attention", "roofline")},
        "gaps": lambda: gaps(trace, min_gap_ns=opts.min_gap_ns, links=_links(trace)),
        "attribution": lambda: attribute(trace, instances=False),  # (a diff computes them: `op_instances`)
        "windows": lambda: windows(trace, links=_links(trace)),
        # those that keep the most (the copies and the launches: 0.12 GB on the 1 GB trace)
        # last, after the graph's build, the path's peak (the report's peak 0.985x, a median
        # 1,636 MB against 1,661 MB in the same time, 4 alternating rounds, when the memory
        # timeline was kept and ran with them)
        "syncs": lambda: sync_stats(trace),
        "copies": lambda: copy_stats(trace),
        "launches": lambda: launch_stats(trace, calls=launch_ops(trace), gpu=_links(trace)),
        "compile": lambda: compile_stats(trace),  # (reads the same launch statistics: shared)
    }
    steps.total = len(tasks) + 1  # the tasks, the findings
    workers = opts.workers or workers_for(trace)
    # on large traces the heaviest start once the critical path's graph is gone, before any
    # task not yet started (see `workers_for`)
    heavy = {name: tasks.pop(name) for name in HEAVY} if large(trace) else {}
    done = _run_all(steps.wrap(tasks), workers=workers, later=steps.wrap(heavy), ready=graph_gone)
    path, whatifs = done.pop("critical_path")
    step_bounds, step_timeline = done.pop("step_timeline")
    extra = {"critical_path": path, **{name: done.pop(name) for name in ("attention", "roofline")}}
    core = done
    scenarios = {w.scenario: w for w in whatifs}
    seed = {"nested": cpu_ops(trace), "launches": launch_ops(trace), "timeline": core["timeline"],
            "gaps": core["gaps"], "syncs": core["syncs"], "copies": core["copies"], "breakdown": core["breakdown"],
            "compile": core["compile"],
            **extra, "no_launch_overhead": scenarios.get("no_launch_overhead"), "step_bounds": step_bounds,
            "step_timeline": step_timeline}
    if before_findings is not None:
        before_findings(Analysis(trace=trace, options=opts, **core, **extra, findings=None, whatifs=whatifs,
                                 notes=[n for name in OPTIONAL for n in notes[name]]))
    findings = _optional("findings", trace, opts, notes["findings"], {"seed": seed})
    steps.end("findings")
    return Analysis(trace=trace, options=opts, **core, **extra, findings=findings, whatifs=whatifs,
                    notes=[n for name in OPTIONAL for n in notes[name]])


def _links(trace: Trace) -> pl.DataFrame:
    """The GPU work with its launch call and op (`links.gpu_links` on the shared op tree and
    launch calls): computed once inside `sharing()`, by the first analysis that asks."""
    return gpu_links(trace, launches=launch_ops(trace, ops=cpu_ops(trace)))


OPTIONAL = ("critical_path", "attention", "roofline", "findings", "whatifs")
HEAVY = ("gaps",)  # needs several times the frames at its peak (see workers_for)
PHASED_BYTES = 300_000_000  # from these frames on (`_frames_bytes`; about 500 MB of JSON), HEAVY wait for the path's graph
WORKERS = 2
# the process's peak with two threads, in multiples of `_frames_bytes` (set when that counted every
# column and the flows too, 0.75x as much on the 1 GB trace, at 10: 9.4x at 250 MB, 8x at 1 GB)
MEMORY_FACTOR = 13


def workers_for(trace: Trace) -> int:
    """Two threads (10-20 % faster: 8.3-9.4 s against 10.7 s on a 250 MB trace), unless two
    analyses at once could take more than half the machine's memory: their peaks add up,
    and running out is worse than slow.

    On large traces (`PHASED_BYTES`) the heaviest analysis after the critical path
    (`HEAVY`) does not start before the path has let its dependency graph go, so that
    their peaks never add up; it runs beside the path's summary (once its segments are
    gathered and have their contexts: `critical_path(on_released=)`), which takes a fraction
    of the graph's memory (when it started before the contexts, the 1 GB trace's analyses: 0.949x the
    time of waiting for the whole path, a peak no higher, 0.987x; 3 alternating rounds,
    `benchmarks/ab.py HEAD --job analyse`). From then on the next thread that comes free
    takes it before any analysis not yet started (`_run_all`'s `later`), rather than after
    all of them: 0.963x the time, the same peak (1.003x; 4 rounds). First, when it waited for
    everything: on the 1 GB trace the peak
    was 5.1 GB instead of 6.1 GB (one thread: 5.1 GB too), in 49 s instead of 44 s (one
    thread: 52 s), when the attribution waited too. Since its C walks the attribution
    peaks at a fifth of what it did and runs beside the critical path (the 1 GB trace's
    analyses: 0.976x the time over 4 alternating rounds, the same peak). Below that size
    the same order costs 10 % and saves little."""
    memory = _physical_memory()
    return 1 if memory is not None and _frames_bytes(trace) * MEMORY_FACTOR > memory // 2 else WORKERS


def large(trace: Trace) -> bool:
    """A trace of `PHASED_BYTES` of frames or more: its heaviest steps are not run at once."""
    return _frames_bytes(trace) >= PHASED_BYTES


def _frames_bytes(trace: Trace) -> int:
    """The `estimated_size` of the frames the analyses read, less the columns they do not
    (`model.UNREAD_OP_COLUMNS`, `model.UNREAD_RUNTIME_COLUMNS`, `model.UNREAD_GPU_COLUMNS`, the flows: what a lean trace,
    `loader.lean`, leaves out, so that it counts the same as the whole trace), measured
    once per trace: a constant column (`loader.constants`) counts as one value until
    something reads it as a Series, which gives it its rows for good, so a second measure
    could differ, and with it `large`."""
    key = id(trace)
    with _SIZES_LOCK:
        if key not in _SIZES:
            weakref.finalize(trace, _SIZES.pop, key, None)  # (first: an object that cannot be watched is not kept)
            read = (trace.ops.drop(UNREAD_OP_COLUMNS, strict=False),
                    trace.runtime.drop(UNREAD_RUNTIME_COLUMNS, strict=False),
                    trace.gpu.drop(UNREAD_GPU_COLUMNS, strict=False))
            _SIZES[key] = sum(f.estimated_size() for f in read)
        return _SIZES[key]


_SIZES: dict[int, int] = {}  # id(trace) -> `_frames_bytes`, while the trace lives
_SIZES_LOCK = threading.Lock()


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):  # not POSIX
        return None


def _steps_timeline(trace: Trace) -> tuple[pl.DataFrame | None, Any]:
    """The profiler steps and the timeline in them, which the findings read (computed with
    the other analyses rather than after them, when the findings run alone)."""
    from tracekit.findings.context import step_bounds, step_timeline

    bounds = step_bounds(trace)
    return bounds, step_timeline(trace, bounds)


def _path_and_whatifs(trace: Trace, opts: AnalysisOptions, notes: dict[str, list[str]],
                      graph_gone: threading.Event) -> tuple[Any, list[Any]]:
    """The critical path and its what-ifs. The what-ifs are computed as soon as the path is
    found, while the dependency graph is whole; then (unless `keep_graph`) the graph is let
    go before the path's contexts and summary are made: at scale it is the largest
    intermediate of all, and they would add to it (the findings get the
    `no_launch_overhead` estimate they need from the what-ifs). `graph_gone` is set once the
    graph is let go and the path's segments have their contexts (`critical_path(on_released=)`),
    or when no path is found."""
    try:
        _links(trace)  # first, on this thread: a failure here is the trace's, not the path's (it propagates)
        whatifs: list[Any] = []

        def on_graph(graph: Any) -> None:
            whatifs.extend(_optional("whatifs", trace, opts, notes["whatifs"], {"graph": graph}) or [])

        path = _optional("critical_path", trace, opts, notes["critical_path"],
                         {"on_graph": on_graph, "on_released": graph_gone.set})
        return path, whatifs if path is not None else []
    finally:
        graph_gone.set()  # (a path that failed, or none: nothing to wait for)


def _run_all(tasks: dict[str, Callable[[], Any]], workers: int, *,
             later: dict[str, Callable[[], Any]] | None = None,
             ready: threading.Event | None = None) -> dict[str, Any]:
    """Run the tasks on `workers` threads, each in a copy of this context (so they share
    the `sharing()` memo), in their order; exceptions propagate as they would in a plain
    loop (the first failed task's, in that order, once every task has ended).

    later: tasks that start once `ready` is set (or once no other task is left to set it),
    each before any task not yet started: a thread that comes free takes one as soon as it
    may. On one thread they run after the others."""
    later = later or {}
    if workers < 2:
        done = {name: task() for name, task in tasks.items()}
        return done | {name: task() for name, task in later.items()}
    order = [*tasks, *later]
    contexts = {name: contextvars.copy_context() for name in order}  # (this thread's: the memo)
    queue, waiting = deque(tasks.items()), deque(later.items())
    results: dict[str, Any] = {}
    errors: dict[str, BaseException] = {}
    lock = threading.Condition()
    running = [0]  # tasks of `tasks` started and not ended

    def take() -> tuple[str, Callable[[], Any], bool] | None:
        with lock:
            while True:
                go = ready is None or ready.is_set() or (not queue and not running[0])
                if waiting and go:
                    return (*waiting.popleft(), False)
                if queue:
                    running[0] += 1
                    return (*queue.popleft(), True)
                if not waiting:
                    return None
                lock.wait(0.01)  # (`ready` is set by a running task: look again soon)

    def work() -> None:
        while (item := take()) is not None:
            name, task, counted = item
            try:
                results[name] = contexts[name].run(task)
            except BaseException as exc:  # noqa: BLE001  (raised on the calling thread, in order)
                errors[name] = exc
            finally:
                if counted:
                    with lock:
                        running[0] -= 1
                        lock.notify_all()

    threads = [threading.Thread(target=work, name=f"tracekit-analyse_{i}", daemon=True)
               for i in range(workers)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:  # an interrupt: nothing more starts; the running tasks end on their own
        with lock:
            queue.clear()
            waiting.clear()
        raise
    for name in order:
        if name in errors:
            raise errors[name]
    return {name: results[name] for name in order}


def _optional(name: str, trace: Trace, opts: AnalysisOptions, notes: list[str], shared: dict[str, Any]) -> Any:
    """Analyses that build on the core ones; a failure becomes a note, never a crash of the report."""
    try:
        if name == "critical_path":
            from tracekit.analysis.critical_path import critical_path

            return critical_path(trace, links=_links(trace), on_graph=shared.get("on_graph"),
                                 keep_graph=opts.keep_graph, on_released=shared.get("on_released"))
        if name == "attention":
            from tracekit.analysis.attention import analyze_attention

            return analyze_attention(trace, ops=cpu_ops(trace), launches=launch_ops(trace))
        if name == "roofline":
            from tracekit.analysis.roofline import roofline

            return roofline(trace, peak_tflops=opts.peak_tflops, peak_gbps=opts.peak_gbps)
        if name == "whatifs":
            from tracekit.analysis.whatif import standard

            return standard(shared["graph"]) if not trace.gpu_work.is_empty() else []
        if name == "findings":
            from tracekit.findings import run_findings

            # the rules on the analyses' threads; by default (`engine.default_workers`) two,
            # but one on large traces, where that saved no time for a higher peak (0.83-1.02 s
            # against 0.83-0.88 s on the 1 GB trace), or where memory is short
            return run_findings(trace, config=opts.findings_config or None, seed=shared["seed"],
                                workers=opts.workers)
    except Exception as exc:  # noqa: BLE001  (one analysis failing must not lose the others)
        notes.append(f"{name} analysis failed: {type(exc).__name__}: {exc}")
        return None
    return None
