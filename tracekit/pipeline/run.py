"""The pipeline's engine: run an ordered list of steps, each on the results it names.

A `Step` is one function with one signature, `run(trace, options, inputs) -> result`,
where `inputs` holds the results of the steps it `needs` (its own dict: a step that pops
an input it is the last to read lets it go at once). The engine keeps each result only
until the last step that needs it has started, unless the step is `kept` (an `Analysis`
field): memory is bounded by the order of the list and what each step keeps, not by
tricks in the analyses.

A step that is `optional` turns a failure into a note ("NAME analysis failed: ...") and
its `fallback` result, which the steps that need it receive (they take None as "not
known"); a failure of any other step is raised. `merge` marks a step whose results over
disjoint windows of a trace combine into the result over their union (None: it must see
the whole trace), the contract a windowed runner for traces larger than memory relies on.

Runners decide only when each step starts: `sequential` (the default) in list order;
`Threaded` on a few threads, each step once its inputs are done, in list order among the
ready ones. The results are the same whichever runs them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tracekit.model import Trace

Progress = Callable[[str, int, int], None]


def _none() -> Any:
    return None


@dataclass(frozen=True)
class Step:
    """One analysis, or one intermediate that later steps receive (see the module docstring)."""

    name: str
    run: Callable[[Trace, Any, dict[str, Any]], Any]
    needs: tuple[str, ...] = ()
    kept: bool = True  # a field of the result (else an intermediate, let go after its last reader)
    optional: bool = False  # a failure becomes a note and `fallback()`, never an error
    fallback: Callable[[], Any] = _none
    note_as: str | None = None  # the analysis a failure note names (default: the step's name)
    merge: Callable[[Sequence[Any]], Any] | None = field(default=None, compare=False)


class Runner(Protocol):
    def __call__(self, plan: Plan) -> None: ...


class Plan:
    """One run of `steps` on a trace: the results so far, and how long each is kept."""

    def __init__(self, trace: Trace, options: Any, steps: Sequence[Step], progress: Progress | None = None) -> None:
        self.trace, self.options, self.steps = trace, options, tuple(steps)
        seen: set[str] = set()
        for s in self.steps:
            missing = [n for n in s.needs if n not in seen]
            if missing or s.name in seen:
                raise ValueError(f"step {s.name!r}: needs {missing} before it, or is named twice")
            seen.add(s.name)
        self.results: dict[str, Any] = {}
        self.notes: list[str] = []
        self._kept = {s.name for s in self.steps if s.kept}
        self._readers = {s.name: sum(s.name in t.needs for t in self.steps) for s in self.steps}
        self._progress, self._done = progress, 0
        self._lock = threading.Lock()

    def execute(self, step: Step) -> None:
        """Run one step on its inputs and keep its result while a later step needs it."""
        inputs = self._take(step)
        try:
            value = step.run(self.trace, self.options, inputs)
        except Exception as exc:
            if not step.optional:
                raise
            value = step.fallback()
            with self._lock:
                self.notes.append(f"{step.note_as or step.name} analysis failed: {type(exc).__name__}: {exc}")
        del inputs
        with self._lock:
            if self._readers[step.name] or step.name in self._kept:
                self.results[step.name] = value
            self._done += 1
            done = self._done
        if self._progress is not None:  # (outside the lock: a slow callback holds no other step up)
            self._progress(step.name, done, len(self.steps))

    def _take(self, step: Step) -> dict[str, Any]:
        """The step's inputs; a result that no later step reads (and no field keeps) leaves
        the plan here, so that the step holds the only reference."""
        with self._lock:
            got = {n: self.results[n] for n in step.needs}
            for n in step.needs:
                self._readers[n] -= 1
                if not self._readers[n] and n not in self._kept:
                    del self.results[n]
            return got


def sequential(plan: Plan) -> None:
    """Every step in list order, on the calling thread."""
    for step in plan.steps:
        plan.execute(step)


class Threaded:
    """Steps on `workers` threads, each once its inputs are done (Polars lets go of the GIL
    while it works, so two cores are used), in list order among the ready ones. A failure
    is raised once every started step has ended, the first in list order; nothing new
    starts after it, nor after an interrupt, which is raised at once (the steps running
    end on their own, on daemon threads: an interrupted command exits without them)."""

    def __init__(self, workers: int = 2) -> None:
        if workers < 1:
            raise ValueError(f"Threaded needs at least one worker, not {workers}")
        self.workers = workers

    def __call__(self, plan: Plan) -> None:
        todo = list(plan.steps)
        done: set[str] = set()
        errors: dict[str, BaseException] = {}
        running = [0]
        cond = threading.Condition()

        def take() -> Step | None:
            with cond:
                while True:
                    if errors or not todo:
                        return None
                    step = next((s for s in todo if all(n in done for n in s.needs)), None)
                    if step is not None:
                        todo.remove(step)
                        running[0] += 1
                        return step
                    if not running[0]:  # (cannot happen: `Plan` orders every need first)
                        return None
                    cond.wait()

        def work() -> None:
            while (step := take()) is not None:
                try:
                    plan.execute(step)
                except BaseException as exc:  # noqa: BLE001  (raised on the calling thread, in order)
                    with cond:
                        errors[step.name] = exc
                finally:
                    with cond:
                        running[0] -= 1
                        done.add(step.name)
                        cond.notify_all()

        threads = [threading.Thread(target=work, name=f"tracekit-pipeline_{n}", daemon=True)
                   for n in range(self.workers)]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                thread.join()
        except BaseException:
            with cond:
                todo.clear()
            raise
        for step in plan.steps:
            if step.name in errors:
                raise errors[step.name]
