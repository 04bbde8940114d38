/* Passes over slices sorted per thread, the C forms of Polars computations that stay the
 * reference: `nest` (`tracekit.analysis.nesting._nest`), `innermost`
 * (`tracekit.analysis.intervals.innermost`) and the others below.
 *
 * nest. Input: five Int64 columns of one length (thread number, start, duration, end, eid), in
 * the order `_nest` sorts them: thread, start, longer first, eid. Output: depth and parent
 * eid per row in that order, with the same definitions as the Polars code, which stays the
 * reference:
 *   depth  = max(0, index in the thread - max(0, closed)), where `closed` counts the rows
 *            before it that are closed at its start t: the thread's slices that end before
 *            t; those that started before t and end at t, when the row's instant opens
 *            (its longest row has a positive duration; else they stay open: a zero-length
 *            slice at the instant a longer one ends is inside it); and the rows of duration
 *            <= 0 of its instant before it (a zero-length slice contains nothing);
 *   parent = the eid of the last earlier row of the thread whose depth is one less
 *            (none at depth 0).
 * For properly nested slices that is the stack of open slices; overlapping ones get the
 * same answer as the Polars code.
 *
 * innermost. Input: slices (group, start, end, length, order) in any order, with the
 * permutation that puts them in group and start order; points (group, at) sorted by group
 * and at. Slices of one group that start together are taken in the order in which the pick
 * is the last candidate: longer first, then lower order (the pass orders each such run
 * itself, so the caller's sort needs two keys, and the slices' columns are read through the
 * permutation, not gathered into it). Output per point: the row of the last slice so taken
 * of its group with start <= at < end, or null. Per group, a stack holds the slices started
 * so far that no later slice dominates (a later one that ends at or after it is always the
 * better pick), so the ends fall from bottom to top; a point pops the slices that ended by
 * it (later points come no earlier) and takes the top. Linear in slices plus points, plus
 * the runs' sorts.
 *
 * covered. Input: intervals (group, start, end >= start) sorted by group and start; queries
 * (group, start, end > start) in any order. Output per query: the length of it the union of
 * its group's intervals covers (or, `whole`, the whole length of the merged runs that
 * overlap it) and whether any does (`intervals.covered_ns`, whose as-of joins stay the
 * reference).
 *
 * stab. Input: slices (start, end) sorted by start; points (at) sorted by at. Output: the
 * (point, slice) index of every pair with start <= at < end, by point (`intervals.stab`,
 * whose Polars form, a `join_where`, stays the reference).
 *
 * rows. Input: keys (unique Int64) and queries. Output per query: the row of the key equal
 * to it, or -1; a table indexed by key value (`nesting.rows_of`, where the keys are event
 * ids: dense), with the hash join as the reference.
 *
 * pixels. Input: the intervals of one timeline lane (start, end, class code, prio). Output: the
 * lane's runs of pixels (`tracekit.report.timeline.pixel_runs`, the Polars reference).
 *
 * Columns cross as Arrow C streams (the PyCapsule interface Polars speaks), without
 * copies on the way in; the outputs are new Arrow arrays that Polars takes over.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_arrow.h"

/* Free the outputs not handed over (NULL entries are nothing). */
static void release_outputs(Output **outs, int count) {
    for (int k = 0; k < count; k++) free_output(outs[k]);
}

/* A tuple of the capsules of `count` outputs, each taken over (and set to NULL) also on
 * failure; NULL with an exception set. */
static PyObject *columns_tuple(Output **outs, int count) {
    PyObject *tuple = PyTuple_New(count);
    int ok = tuple != NULL;
    for (int j = 0; j < count; j++) {
        PyObject *capsule = column_capsule(outs[j]);
        outs[j] = NULL;
        if (!capsule || !tuple) {
            ok = 0;
            Py_XDECREF(capsule);
        } else {
            PyTuple_SET_ITEM(tuple, j, capsule);
        }
    }
    if (!ok) Py_CLEAR(tuple);
    return tuple;
}

/* -- the pass -------------------------------------------------------------------------- */

static int by_value(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* depth and parent of rows [a, b), one thread; `ends` and `last` are scratch of b - a. */
static void nest_thread(const int64_t *ts, const int64_t *dur, const int64_t *end, const int64_t *eid,
                        int64_t a, int64_t b, int64_t *ends, int64_t *last, int64_t *depth, int64_t *parent,
                        uint8_t *valid, int64_t *nulls) {
    int64_t n = b - a;
    memcpy(ends, end + a, (size_t)n * sizeof(int64_t));
    qsort(ends, (size_t)n, sizeof(int64_t), by_value);
    /* ends before / at or before the current start; `last` is set up to `deepest` */
    int64_t lt = 0, le = 0, deepest = -1;
    int64_t flat = 0, flat_before = 0, opens = 0; /* the start instant's rows of dur <= 0, those before the row */
    for (int64_t k = 0; k < n; k++) {
        int64_t i = a + k;
        if (k == 0 || ts[i] != ts[i - 1]) { /* a new start instant (its longest row first) */
            flat = flat_before = 0;
            for (int64_t j = i; j < b && ts[j] == ts[i]; j++) flat += dur[j] <= 0;
            opens = dur[i] > 0;
            while (lt < n && ends[lt] < ts[i]) lt++;
            while (le < n && ends[le] <= ts[i]) le++;
        }
        int64_t before = lt + (opens ? le - lt - flat : 0) + flat_before;
        flat_before += dur[i] <= 0;
        if (before < 0) before = 0;
        int64_t d = k - before;
        if (d < 0) d = 0;
        depth[i] = d;
        if (d >= 1 && d - 1 <= deepest && last[d - 1] >= 0) {
            parent[i] = eid[last[d - 1]];
            valid[i >> 3] |= (uint8_t)(1u << (i & 7));
        } else {
            parent[i] = 0;
            (*nulls)++;
        }
        while (deepest < d) last[++deepest] = -1;
        last[d] = i;
    }
}

/* nest(thread, ts, dur, end, eid) -> (depth, parent_eid) as Arrow C stream capsules (the
 * arguments are the five columns' capsules) */
static PyObject *nest(PyObject *self, PyObject *args) {
    Column cols[5];
    if (read_columns(args, cols, 5) < 0) return NULL;
    Output *depth = NULL, *parent = NULL;
    int64_t *ends = NULL, *last = NULL;
    PyObject *result = NULL;
    int64_t n = cols[0].length;
    depth = new_output(n, 0);
    parent = new_output(n, 1);
    ends = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    last = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!depth || !parent || !ends || !last) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *g = cols[0].values, *ts = cols[1].values, *dur = cols[2].values, *end = cols[3].values,
                  *eid = cols[4].values;
    int64_t nulls = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t a = 0; a < n;) {
        int64_t b = a + 1;
        while (b < n && g[b] == g[a]) b++;
        nest_thread(ts, dur, end, eid, a, b, ends, last, depth->values, parent->values, parent->valid, &nulls);
        a = b;
    }
    Py_END_ALLOW_THREADS
    parent->null_count = nulls;
    Output *outs[2] = {depth, parent};
    depth = parent = NULL; /* the capsules own them */
    result = columns_tuple(outs, 2);
done:
    for (int k = 0; k < 5; k++) drop_column(&cols[k]);
    free_output(depth);
    free_output(parent);
    free(ends);
    free(last);
    return result;
}

/* A slice of a run that starts together: its sort keys and its index. */
typedef struct {
    int64_t length, order, index;
} Tied;

/* Longer first, then lower order: the order in which the pick is the last candidate. */
static int by_tie(const void *a, const void *b) {
    const Tied *x = a, *y = b;
    if (x->length != y->length) return x->length < y->length ? 1 : -1;
    return (x->order > y->order) - (x->order < y->order);
}

/* The slices in the order the pass takes them: `taken[k]` is the row of the k-th, the
 * rows put in group and start order by `perm`, and runs of one group and start ordered by
 * `by_tie`. -1 when out of memory. */
static int take_order(const int64_t *g, const int64_t *start, const int64_t *length, const int64_t *order,
                      const int64_t *perm, int64_t n, int64_t *taken) {
    Tied *run = NULL;
    int64_t cap = 0;
    for (int64_t a = 0; a < n;) {
        int64_t b = a + 1, first = perm[a];
        while (b < n && g[perm[b]] == g[first] && start[perm[b]] == start[first]) b++;
        if (b - a == 1) {
            taken[a] = first;
        } else {
            if (b - a > cap) {
                cap = b - a;
                Tied *grown = realloc(run, (size_t)cap * sizeof(Tied));
                if (!grown) {
                    free(run);
                    return -1;
                }
                run = grown;
            }
            for (int64_t k = a; k < b; k++) run[k - a] = (Tied){length[perm[k]], order[perm[k]], perm[k]};
            qsort(run, (size_t)(b - a), sizeof(Tied), by_tie);
            for (int64_t k = a; k < b; k++) taken[k] = run[k - a].index;
        }
        a = b;
    }
    free(run);
    return 0;
}

/* innermost((slice_group, slice_start, slice_end, slice_length, slice_order, permutation),
 * (point_group, point_at)) -> slice row per point (capsule) */
static PyObject *innermost(PyObject *self, PyObject *args) {
    PyObject *slices, *points;
    if (!PyArg_ParseTuple(args, "OO", &slices, &points)) return NULL;
    Column cols[8]; /* the slices' group, start, end, length, order, permutation; the points' group, at */
    if (read_columns(slices, cols, 6) < 0) return NULL;
    if (read_columns(points, cols + 6, 2) < 0) {
        for (int k = 0; k < 6; k++) drop_column(&cols[k]);
        return NULL;
    }
    Output *pick = NULL;
    int64_t *stack = NULL, *taken = NULL;
    PyObject *result = NULL;
    int64_t n = cols[0].length, m = cols[6].length;
    pick = new_output(m, 1);
    stack = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    taken = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!pick || !stack || !taken) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *sg = cols[0].values, *start = cols[1].values, *end = cols[2].values, *perm = cols[5].values,
                  *pg = cols[6].values, *at = cols[7].values;
    int64_t nulls = 0;
    int ok = 1;
    for (int64_t k = 0; k < n; k++) /* (a permutation that points outside the slices is refused) */
        if (perm[k] < 0 || perm[k] >= n) ok = 0;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "the permutation points outside the slices");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    ok = take_order(sg, start, cols[3].values, cols[4].values, perm, n, taken) == 0;
    int64_t j = 0, top = 0; /* next slice to take (its place in `taken`); stack size */
    for (int64_t i = 0; ok && i < m; i++) {
        if (i == 0 || pg[i] != pg[i - 1]) { /* a new group: its slices, from an empty stack */
            while (j < n && sg[taken[j]] < pg[i]) j++;
            top = 0;
        }
        while (j < n && sg[taken[j]] == pg[i] && start[taken[j]] <= at[i]) {
            int64_t s = taken[j++];
            while (top > 0 && end[stack[top - 1]] <= end[s]) top--;
            stack[top++] = s;
        }
        while (top > 0 && end[stack[top - 1]] <= at[i]) top--;
        if (top > 0) {
            pick->values[i] = stack[top - 1];
            pick->valid[i >> 3] |= (uint8_t)(1u << (i & 7));
        } else {
            pick->values[i] = 0;
            nulls++;
        }
    }
    Py_END_ALLOW_THREADS
    if (!ok) {
        PyErr_NoMemory();
        goto done;
    }
    pick->null_count = nulls;
    result = column_capsule(pick);
    pick = NULL;
done:
    for (int k = 0; k < 8; k++) drop_column(&cols[k]);
    free_output(pick);
    free(stack);
    free(taken);
    return result;
}

/* stab((slice_start, slice_end), (point_at,)) -> (point index, slice index) of every pair
 * with start <= at < end. Slices sorted by start, points by at (no nulls in either). The
 * slices started by a point and not yet ended are kept in `open` (start order); a point
 * drops those that ended by it (no later point needs them) and pairs with the rest, which
 * all contain it: linear in slices plus points plus pairs. */
static int grow_pairs(int64_t **pt, int64_t **sl, int64_t *cap) {
    int64_t want = *cap ? *cap * 2 : 1024;
    int64_t *a = realloc(*pt, (size_t)want * sizeof(int64_t));
    if (!a) return -1;
    *pt = a;
    int64_t *b = realloc(*sl, (size_t)want * sizeof(int64_t));
    if (!b) return -1;
    *sl = b;
    *cap = want;
    return 0;
}

static PyObject *stab(PyObject *self, PyObject *args) {
    PyObject *slices, *points;
    if (!PyArg_ParseTuple(args, "OO", &slices, &points)) return NULL;
    Column cols[3]; /* the slices' start, end; the points' at */
    if (read_columns(slices, cols, 2) < 0) return NULL;
    if (read_columns(points, cols + 2, 1) < 0) {
        for (int k = 0; k < 2; k++) drop_column(&cols[k]);
        return NULL;
    }
    int64_t n = cols[0].length, m = cols[2].length, cap = 0, count = 0;
    int64_t *open = malloc((size_t)(n ? n : 1) * sizeof(int64_t)), *pt = NULL, *sl = NULL;
    Output *outs[2] = {NULL, NULL};
    PyObject *result = NULL;
    int nomem = open == NULL;
    const int64_t *start = cols[0].values, *end = cols[1].values, *at = cols[2].values;
    Py_BEGIN_ALLOW_THREADS
    int64_t j = 0, top = 0; /* next slice to start; open slices */
    for (int64_t i = 0; i < m && !nomem; i++) {
        while (j < n && start[j] <= at[i]) open[top++] = j++;
        int64_t kept = 0;
        for (int64_t k = 0; k < top; k++) {
            if (end[open[k]] <= at[i]) continue;
            open[kept++] = open[k];
            if (count == cap && grow_pairs(&pt, &sl, &cap) < 0) {
                nomem = 1;
                break;
            }
            pt[count] = i;
            sl[count++] = open[k];
        }
        if (!nomem) top = kept;
    }
    Py_END_ALLOW_THREADS
    if (nomem) {
        PyErr_NoMemory();
        goto done;
    }
    for (int k = 0; k < 2; k++) {
        outs[k] = calloc(1, sizeof(Output));
        if (!outs[k]) {
            PyErr_NoMemory();
            goto done;
        }
        outs[k]->length = count;
    }
    if (!pt) { /* no pair: empty columns */
        pt = malloc(sizeof(int64_t));
        sl = malloc(sizeof(int64_t));
        if (!pt || !sl) {
            PyErr_NoMemory();
            goto done;
        }
    }
    outs[0]->values = pt;
    outs[1]->values = sl;
    pt = sl = NULL; /* the outputs own them */
    result = columns_tuple(outs, 2);
done:
    for (int k = 0; k < 3; k++) drop_column(&cols[k]);
    release_outputs(outs, 2);
    free(open);
    free(pt);
    free(sl);
    return result;
}

/* The first k in [lo, hi) with v[k] > x (or, `or_equal`, v[k] >= x), v rising; else hi. */
static int64_t first_past(const int64_t *v, int64_t lo, int64_t hi, int64_t x, int or_equal) {
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (v[mid] > x || (or_equal && v[mid] == x)) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* covered((group, start, end), (group, q_start, q_end), whole) -> (covered, hit) per query.
 * The intervals (end >= start) sorted by group and start are merged into runs (a run goes
 * on while the next start is at or before its end), with the running sum of their lengths;
 * a query finds the runs of its group that overlap [q_start, q_end) by binary search:
 * `hit` when there is one, `covered` the length of the query they cover (with `whole`: the
 * runs' whole lengths). */
static PyObject *covered(PyObject *self, PyObject *args) {
    PyObject *intervals, *queries;
    int whole;
    if (!PyArg_ParseTuple(args, "OOp", &intervals, &queries, &whole)) return NULL;
    Column cols[6]; /* the intervals' group, start, end; the queries' group, start, end */
    if (read_columns(intervals, cols, 3) < 0) return NULL;
    if (read_columns(queries, cols + 3, 3) < 0) {
        for (int k = 0; k < 3; k++) drop_column(&cols[k]);
        return NULL;
    }
    int64_t n = cols[0].length, m = cols[3].length;
    Output *outs[2] = {new_output(m, 0), new_output(m, 0)};
    int64_t *rg = malloc((size_t)(n + 1) * sizeof(int64_t)), *rs = malloc((size_t)(n + 1) * sizeof(int64_t)),
            *re = malloc((size_t)(n + 1) * sizeof(int64_t)), *sum = malloc((size_t)(n + 1) * sizeof(int64_t));
    PyObject *result = NULL;
    if (!outs[0] || !outs[1] || !rg || !rs || !re || !sum) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *g = cols[0].values, *start = cols[1].values, *end = cols[2].values, *qg = cols[3].values,
                  *qs = cols[4].values, *qe = cols[5].values;
    int64_t *part = outs[0]->values, *hit = outs[1]->values;
    Py_BEGIN_ALLOW_THREADS
    int64_t r = 0; /* runs */
    for (int64_t i = 0; i < n; i++) {
        if (r == 0 || g[i] != rg[r - 1] || start[i] > re[r - 1]) {
            rg[r] = g[i], rs[r] = start[i], re[r] = end[i];
            r++;
        } else if (end[i] > re[r - 1]) {
            re[r - 1] = end[i];
        }
    }
    sum[0] = 0;
    for (int64_t k = 0; k < r; k++) sum[k + 1] = sum[k] + (re[k] - rs[k]);
    for (int64_t j = 0; j < m; j++) {
        int64_t lo = first_past(rg, 0, r, qg[j], 1), hi = first_past(rg, lo, r, qg[j], 0);
        int64_t a = first_past(re, lo, hi, qs[j], 0), b = first_past(rs, a, hi, qe[j], 1);
        hit[j] = a < b;
        part[j] = 0;
        if (a < b) {
            part[j] = sum[b] - sum[a];
            if (!whole) {
                if (qs[j] > rs[a]) part[j] -= qs[j] - rs[a];
                if (re[b - 1] > qe[j]) part[j] -= re[b - 1] - qe[j];
            }
        }
    }
    Py_END_ALLOW_THREADS
    result = columns_tuple(outs, 2);
done:
    for (int k = 0; k < 6; k++) drop_column(&cols[k]);
    release_outputs(outs, 2);
    free(rg);
    free(rs);
    free(re);
    free(sum);
    return result;
}

/* The capsule of `*out` (taken over), or NULL with an IndexError when a row was out of range. */
static PyObject *one_column(Output **out, int bad) {
    if (bad) {
        PyErr_SetString(PyExc_IndexError, "row out of range");
        return NULL;
    }
    PyObject *capsule = column_capsule(*out);
    *out = NULL;
    return capsule;
}

/* The arguments of a walk up the tree: a pair of columns (parent_row and one more) and
 * `levels`. 0, or -1 with an exception set (nothing held). */
static int read_walk(PyObject *args, Column cols[2], long long *levels) {
    PyObject *pair;
    if (!PyArg_ParseTuple(args, "OL", &pair, levels)) return -1;
    return read_columns(pair, cols, 2);
}

/* flag_up(parent_row, flagged, levels) -> 0/1 per row: flagged, or an ancestor at most
 * `levels` steps above a flagged row (parent_row -1: none). `reach` keeps the most steps
 * left with which a row was met, so each row is walked past again only with more. */
static PyObject *flag_up(PyObject *self, PyObject *args) {
    long long levels;
    Column cols[2];
    if (read_walk(args, cols, &levels) < 0) return NULL;
    int64_t n = cols[0].length;
    const int64_t *parent = cols[0].values, *flagged = cols[1].values;
    Output *out = new_output(n, 0);
    int64_t *reach = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    PyObject *result = NULL;
    int bad = 0;
    if (!out || !reach) {
        PyErr_NoMemory();
    } else {
        Py_BEGIN_ALLOW_THREADS
        for (int64_t i = 0; i < n; i++) {
            out->values[i] = flagged[i] != 0;
            reach[i] = -1;
        }
        for (int64_t i = 0; i < n && !bad; i++) {
            if (!flagged[i]) continue;
            int64_t left = levels, p = parent[i];
            while (p >= 0 && left > 0) {
                if (p >= n) {
                    bad = 1;
                    break;
                }
                if (reach[p] >= left - 1) break; /* walked from here already, as far or further */
                reach[p] = left - 1;
                out->values[p] = 1;
                p = parent[p];
                left--;
            }
        }
        Py_END_ALLOW_THREADS
        result = one_column(&out, bad);
    }
    free_output(out);
    free(reach);
    for (int k = 0; k < 2; k++) drop_column(&cols[k]);
    return result;
}

/* climb((parent_row, hit, go, op), start_row, levels) -> (hit_row, op_row) per start: walk
 * up from the start row through at most `levels` rows, on to the parent while `go`; each
 * result is the last row met with its flag (in `_host_context`'s walk a module ends the walk,
 * so the hit is the nearest module, and the last op met is the outermost). -1: none met; a
 * start row of -1 meets none. */
static PyObject *climb(PyObject *self, PyObject *args) {
    PyObject *tree, *starts;
    long long levels;
    if (!PyArg_ParseTuple(args, "OOL", &tree, &starts, &levels)) return NULL;
    Column cols[4], from;
    if (read_columns(tree, cols, 4) < 0) return NULL;
    if (read_column(starts, &from) < 0) {
        for (int k = 0; k < 4; k++) drop_column(&cols[k]);
        return NULL;
    }
    int64_t n = cols[0].length, m = from.length;
    const int64_t *parent = cols[0].values, *hit = cols[1].values, *go = cols[2].values, *op = cols[3].values;
    Output *hits = new_output(m, 0), *ops = new_output(m, 0);
    PyObject *result = NULL;
    int bad = 0;
    if (!hits || !ops) {
        PyErr_NoMemory();
    } else {
        Py_BEGIN_ALLOW_THREADS
        for (int64_t i = 0; i < m && !bad; i++) {
            int64_t at = from.values[i], h = -1, o = -1;
            for (long long step = 0; step < levels && at >= 0; step++) {
                if (at >= n) {
                    bad = 1;
                    break;
                }
                if (op[at]) o = at;
                if (hit[at]) h = at;
                at = go[at] ? parent[at] : -1;
            }
            hits->values[i] = h;
            ops->values[i] = o;
        }
        Py_END_ALLOW_THREADS
        if (bad) {
            PyErr_SetString(PyExc_IndexError, "row out of range");
        } else {
            Output *outs[2] = {hits, ops};
            hits = ops = NULL;
            result = columns_tuple(outs, 2);
        }
    }
    free_output(hits);
    free_output(ops);
    drop_column(&from);
    for (int k = 0; k < 4; k++) drop_column(&cols[k]);
    return result;
}

/* up_until((parent_row, end), start_row, need, levels) -> row per start: the first row met
 * walking up from the start row (itself included, at most `levels` rows) whose end is at or
 * after `need`; -1 when none is (`links._containing_op`'s walk). */
static PyObject *up_until(PyObject *self, PyObject *args) {
    PyObject *tree;
    PyObject *asked[2];
    long long levels;
    if (!PyArg_ParseTuple(args, "OOOL", &tree, &asked[0], &asked[1], &levels)) return NULL;
    Column cols[2], q[2];
    if (read_columns(tree, cols, 2) < 0) return NULL;
    PyObject *pair = PyTuple_Pack(2, asked[0], asked[1]);
    if (!pair || read_columns(pair, q, 2) < 0) {
        Py_XDECREF(pair);
        for (int k = 0; k < 2; k++) drop_column(&cols[k]);
        return NULL;
    }
    Py_DECREF(pair);
    int64_t n = cols[0].length, m = q[0].length;
    const int64_t *parent = cols[0].values, *end = cols[1].values, *from = q[0].values, *need = q[1].values;
    Output *out = new_output(m, 0);
    PyObject *result = NULL;
    int bad = 0;
    if (!out) {
        PyErr_NoMemory();
    } else {
        Py_BEGIN_ALLOW_THREADS
        for (int64_t i = 0; i < m && !bad; i++) {
            int64_t at = from[i], found = -1;
            for (long long step = 0; step < levels && at >= 0; step++) {
                if (at >= n) {
                    bad = 1;
                    break;
                }
                if (end[at] >= need[i]) {
                    found = at;
                    break;
                }
                at = parent[at];
            }
            out->values[i] = found;
        }
        Py_END_ALLOW_THREADS
        result = one_column(&out, bad);
    }
    free_output(out);
    for (int k = 0; k < 2; k++) {
        drop_column(&q[k]);
        drop_column(&cols[k]);
    }
    return result;
}

/* tree_sums((parent_row,), (event_row, dur, kernel), levels) -> (events_self, ns_self,
 * events_incl, kernels_incl, ns_incl) per row: the events of the row (event_row -1: of no row),
 * their summed `dur`, and the same over the row and every row at most `levels` steps below it
 * (attribution's inclusive GPU time, `kernel` counted apart). Each row with events of its own
 * adds them to its ancestors on the way up: the events meet the rows an (op, ancestor) pair
 * list would give them, without the list. */
static PyObject *tree_sums(PyObject *self, PyObject *args) {
    PyObject *tree, *events;
    long long levels;
    if (!PyArg_ParseTuple(args, "OOL", &tree, &events, &levels)) return NULL;
    Column cols[1], ev[3];
    if (read_columns(tree, cols, 1) < 0) return NULL;
    if (read_columns(events, ev, 3) < 0) {
        drop_column(&cols[0]);
        return NULL;
    }
    int64_t n = cols[0].length, m = ev[0].length;
    const int64_t *parent = cols[0].values, *row = ev[0].values, *dur = ev[1].values, *kernel = ev[2].values;
    Output *outs[5] = {NULL};
    int64_t *kernels_self = calloc((size_t)(n ? n : 1), sizeof(int64_t));
    PyObject *result = NULL;
    int bad = 0, ok = kernels_self != NULL;
    for (int k = 0; k < 5 && ok; k++) ok = (outs[k] = new_output(n, 0)) != NULL;
    if (!ok) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *ev_self = outs[0]->values, *ns_self = outs[1]->values, *ev_incl = outs[2]->values,
            *k_incl = outs[3]->values, *ns_incl = outs[4]->values;
    Py_BEGIN_ALLOW_THREADS
    memset(ev_self, 0, (size_t)n * sizeof(int64_t));
    memset(ns_self, 0, (size_t)n * sizeof(int64_t));
    for (int64_t j = 0; j < m; j++) {
        int64_t r = row[j];
        if (r < 0) continue;
        if (r >= n) {
            bad = 1;
            break;
        }
        ev_self[r] += 1;
        ns_self[r] += dur[j];
        kernels_self[r] += kernel[j] != 0;
    }
    if (!bad) {
        memcpy(ev_incl, ev_self, (size_t)n * sizeof(int64_t));
        memcpy(k_incl, kernels_self, (size_t)n * sizeof(int64_t));
        memcpy(ns_incl, ns_self, (size_t)n * sizeof(int64_t));
    }
    for (int64_t i = 0; i < n && !bad; i++) {
        if (!ev_self[i]) continue;
        int64_t p = parent[i];
        for (long long left = levels; p >= 0 && left > 0; left--) {
            if (p >= n) {
                bad = 1;
                break;
            }
            ev_incl[p] += ev_self[i];
            k_incl[p] += kernels_self[i];
            ns_incl[p] += ns_self[i];
            p = parent[p];
        }
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_IndexError, "row out of range");
        goto done;
    }
    result = columns_tuple(outs, 5); /* takes the outputs over */
done:
    release_outputs(outs, 5);
    free(kernels_self);
    drop_column(&cols[0]);
    for (int k = 0; k < 3; k++) drop_column(&ev[k]);
    return result;
}

/* same_above((parent_row, code), levels) -> 0/1 per row: a row at most `levels` steps above it
 * (itself excluded) has the same code (attribution's recursion: an op inside an op of the
 * same name). */
static PyObject *same_above(PyObject *self, PyObject *args) {
    long long levels;
    Column cols[2];
    if (read_walk(args, cols, &levels) < 0) return NULL;
    int64_t n = cols[0].length;
    const int64_t *parent = cols[0].values, *code = cols[1].values;
    Output *out = new_output(n, 0);
    PyObject *result = NULL;
    int bad = 0;
    if (!out) {
        PyErr_NoMemory();
    } else {
        Py_BEGIN_ALLOW_THREADS
        for (int64_t i = 0; i < n && !bad; i++) {
            int64_t p = parent[i], found = 0;
            for (long long left = levels; p >= 0 && left > 0 && !found; left--) {
                if (p >= n) {
                    bad = 1;
                    break;
                }
                found = p != i && code[p] == code[i];
                p = parent[p];
            }
            out->values[i] = found;
        }
        Py_END_ALLOW_THREADS
        result = one_column(&out, bad);
    }
    free_output(out);
    for (int k = 0; k < 2; k++) drop_column(&cols[k]);
    return result;
}

/* chains((parent_row, code)) -> (chain of each row, parent chain of each chain, code of each
 * chain): rows whose chains of codes from the root down are equal get one chain number
 * (numbered as first met, a parent's before its children's). The op paths are then built
 * once per chain, not once per op. A cycle in the parent rows raises ValueError. */
typedef struct {
    int64_t parent, code, id; /* id -1: empty slot */
} Slot;

static int64_t chain_of(Slot *table, int64_t mask, int64_t parent, int64_t code, int64_t *count,
                        int64_t *chain_parent, int64_t *chain_code) {
    uint64_t h = (uint64_t)parent * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)code + 0x632BE59BD9B4E019ULL);
    h ^= h >> 29;
    for (int64_t at = (int64_t)(h & (uint64_t)mask);; at = (at + 1) & mask) {
        Slot *slot = &table[at];
        if (slot->id < 0) {
            slot->parent = parent;
            slot->code = code;
            slot->id = (*count)++;
            chain_parent[slot->id] = parent;
            chain_code[slot->id] = code;
            return slot->id;
        }
        if (slot->parent == parent && slot->code == code) return slot->id;
    }
}

static PyObject *chains(PyObject *self, PyObject *args) {
    PyObject *pair;
    if (!PyArg_ParseTuple(args, "O", &pair)) return NULL;
    Column cols[2];
    if (read_columns(pair, cols, 2) < 0) return NULL;
    int64_t n = cols[0].length;
    const int64_t *parent = cols[0].values, *code = cols[1].values;
    int64_t size = 2;
    while (size < 2 * n) size <<= 1;
    Slot *table = malloc((size_t)size * sizeof(Slot));
    int64_t *stack = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    Output *row_chain = new_output(n, 0), *chain_parent = new_output(n, 0), *chain_code = new_output(n, 0);
    PyObject *result = NULL;
    int bad = 0;
    if (!table || !stack || !row_chain || !chain_parent || !chain_code) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t count = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t i = 0; i < size; i++) table[i].id = -1;
    for (int64_t i = 0; i < n; i++) row_chain->values[i] = -1;
    for (int64_t i = 0; i < n && !bad; i++) {
        if (row_chain->values[i] >= 0) continue;
        int64_t top = 0, r = i; /* climb to a row whose chain is known, or past the root */
        while (r >= 0) {
            if (r >= n || row_chain->values[r] == -2) { /* out of range, or a cycle */
                bad = 1;
                break;
            }
            if (row_chain->values[r] >= 0) break;
            row_chain->values[r] = -2; /* on the stack (each row is pushed once: top < n) */
            stack[top++] = r;
            r = parent[r];
        }
        if (bad) break;
        int64_t above = r >= 0 ? row_chain->values[r] : -1;
        while (top > 0) {
            int64_t row = stack[--top];
            above = chain_of(table, size - 1, above, code[row], &count, chain_parent->values, chain_code->values);
            row_chain->values[row] = above;
        }
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "parent rows out of range or in a cycle");
        goto done;
    }
    chain_parent->length = chain_code->length = count;
    Output *outs[3] = {row_chain, chain_parent, chain_code};
    row_chain = chain_parent = chain_code = NULL;
    result = columns_tuple(outs, 3);
done:
    free_output(row_chain);
    free_output(chain_parent);
    free_output(chain_code);
    free(table);
    free(stack);
    for (int k = 0; k < 2; k++) drop_column(&cols[k]);
    return result;
}

/* rows(keys, queries, low, span) -> the row of each query in `keys`, -1 where absent; None
 * when a key repeats. A table of `span` slots, one per value from `low`, holds each key's row:
 * the caller picks this when the keys are dense (span a small multiple of their count) and
 * has given every key a slot (low <= key < low + span); a query outside the span is absent. */
static PyObject *rows(PyObject *self, PyObject *args) {
    PyObject *keys_capsule, *queries_capsule;
    long long low, span;
    if (!PyArg_ParseTuple(args, "OOLL", &keys_capsule, &queries_capsule, &low, &span)) return NULL;
    if (span < 1) {
        PyErr_SetString(PyExc_ValueError, "span must be at least 1");
        return NULL;
    }
    Column keys, queries;
    if (read_column(keys_capsule, &keys) < 0) return NULL;
    if (read_column(queries_capsule, &queries) < 0) {
        drop_column(&keys);
        return NULL;
    }
    int64_t n = queries.length;
    int64_t *table = malloc((size_t)span * sizeof(int64_t));
    Output *out = new_output(n, 0);
    PyObject *result = NULL;
    int bad = 0, repeated = 0;
    if (!table || !out) {
        PyErr_NoMemory();
    } else {
        Py_BEGIN_ALLOW_THREADS
        for (int64_t i = 0; i < span; i++) table[i] = -1;
        for (int64_t i = 0; i < keys.length; i++) {
            /* unsigned difference: no overflow, and a key below `low` lands past the span */
            uint64_t slot = (uint64_t)keys.values[i] - (uint64_t)low;
            if (slot >= (uint64_t)span) {
                bad = 1;
                break;
            }
            if (table[slot] >= 0) {
                repeated = 1;
                break;
            }
            table[slot] = i;
        }
        if (!bad && !repeated) {
            for (int64_t i = 0; i < n; i++) {
                uint64_t slot = (uint64_t)queries.values[i] - (uint64_t)low;
                out->values[i] = slot < (uint64_t)span ? table[slot] : -1;
            }
        }
        Py_END_ALLOW_THREADS
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "a key lies outside the span");
        } else if (repeated) {
            result = Py_NewRef(Py_None);
        } else {
            result = column_capsule(out);
            out = NULL;
        }
    }
    free_output(out);
    free(table);
    drop_column(&keys);
    drop_column(&queries);
    return result;
}

/* pixels((start, end, cls, prio), t0, t1, width, classes) -> (x0, x1, cls, covered, n, level):
 * the timeline runs of one lane (`tracekit.report.timeline.pixel_runs`, whose Polars code
 * stays the reference), or None when the window times the width does not fit in 64 bits.
 * Times are counted in 1/width ns, so that a pixel is `span` = t1 - t0 units and every sum
 * is exact. Each interval, clipped to [t0, t1], adds its overlap with each pixel it touches
 * to that pixel's cell of its class (cls: 0..classes-1, in the order of the class names),
 * with the largest prio and a count. A pixel takes the class of highest score (its prio
 * when it covers a quarter of the pixel, else 0), then most overlap, then lowest code; its
 * level is the covered quarters of the pixel (all classes, 1..4). Neighbouring pixels of
 * one class and level make one run: covered = the run's overlap summed over every class,
 * n = the counts of the chosen class. Output in pixel order. */
static PyObject *pixels(PyObject *self, PyObject *args) {
    PyObject *quad;
    long long t0, t1, width, classes;
    if (!PyArg_ParseTuple(args, "OLLLL", &quad, &t0, &t1, &width, &classes)) return NULL;
    if (width < 1 || classes < 1 || t1 <= t0 || width > (1LL << 24) || classes > (1LL << 16)) {
        PyErr_SetString(PyExc_ValueError, "need t0 < t1, 1 <= width <= 2**24 and 1 <= classes <= 2**16");
        return NULL;
    }
    int64_t span, top;
    if (__builtin_sub_overflow((int64_t)t1, (int64_t)t0, &span) ||
        __builtin_mul_overflow(span, (int64_t)(width > 4 ? width + 1 : 5), &top))
        Py_RETURN_NONE; /* too wide for 64-bit units: the caller takes the Polars path */
    Column cols[4];
    if (read_columns(quad, cols, 4) < 0) return NULL;
    const int64_t *start = cols[0].values, *end = cols[1].values, *cls = cols[2].values, *prio = cols[3].values;
    int64_t n = cols[0].length, w = width, k = classes, cells = w * k;
    int64_t *ov = calloc((size_t)cells, sizeof(int64_t)), *count = calloc((size_t)cells, sizeof(int64_t));
    int64_t *best = malloc((size_t)cells * sizeof(int64_t)), *all = calloc((size_t)w, sizeof(int64_t));
    Output *out[6] = {NULL};
    for (int j = 0; j < 6; j++) out[j] = new_output(w, 0);
    PyObject *result = NULL;
    int bad = 0, missing = !ov || !count || !best || !all;
    for (int j = 0; j < 6; j++) missing = missing || !out[j];
    if (missing) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t runs = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t c = 0; c < cells; c++) best[c] = INT64_MIN;
    for (int64_t i = 0; i < n && !bad; i++) {
        int64_t a = start[i] < t0 ? t0 : start[i] > t1 ? t1 : start[i];
        int64_t b = end[i] < t0 ? t0 : end[i] > t1 ? t1 : end[i];
        int64_t s = (a - t0) * w, e = (b - t0) * w;
        if (e <= s) continue;
        if (cls[i] < 0 || cls[i] >= k) {
            bad = 1;
            break;
        }
        int64_t first = s / span, stop = (e + span - 1) / span; /* pixels first .. stop-1 */
        if (stop > w) stop = w;
        for (int64_t p = first; p < stop; p++) {
            int64_t lo = s > p * span ? s : p * span, hi = e < (p + 1) * span ? e : (p + 1) * span;
            int64_t cell = p * k + cls[i];
            ov[cell] += hi - lo;
            count[cell] += 1;
            if (prio[i] > best[cell]) best[cell] = prio[i];
            all[p] += hi - lo;
        }
    }
    int64_t quarter = span / 4 + (span % 4 != 0); /* ov * 4 >= span  <=>  ov >= ceil(span / 4) */
    int64_t prev_p = -2, prev_c = -1, prev_level = -1;
    for (int64_t p = 0; p < w && !bad; p++) {
        int64_t pick = -1, pick_score = 0, pick_ov = 0;
        for (int64_t c = 0; c < k; c++) {
            int64_t cell = p * k + c;
            if (!count[cell]) continue;
            int64_t score = ov[cell] >= quarter ? best[cell] : 0;
            if (pick < 0 || score > pick_score || (score == pick_score && ov[cell] > pick_ov)) {
                pick = c;
                pick_score = score;
                pick_ov = ov[cell];
            }
        }
        if (pick < 0) continue; /* nothing in this pixel */
        int64_t covered = all[p] < span ? all[p] : span;
        int64_t level = (covered * 4 + span - 1) / span;
        level = level < 1 ? 1 : level > 4 ? 4 : level;
        if (p != prev_p + 1 || pick != prev_c || level != prev_level) {
            out[0]->values[runs] = p;
            out[2]->values[runs] = pick;
            out[3]->values[runs] = 0;
            out[4]->values[runs] = 0;
            out[5]->values[runs] = level;
            runs++;
        }
        out[1]->values[runs - 1] = p + 1;
        out[3]->values[runs - 1] += all[p];
        out[4]->values[runs - 1] += count[p * k + pick];
        prev_p = p;
        prev_c = pick;
        prev_level = level;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "class code out of range");
        goto done;
    }
    for (int j = 0; j < 6; j++) out[j]->length = runs;
    result = columns_tuple(out, 6);
done:
    release_outputs(out, 6);
    free(ov);
    free(count);
    free(best);
    free(all);
    for (int j = 0; j < 4; j++) drop_column(&cols[j]);
    return result;
}

static PyMethodDef methods[] = {
    {"pixels", pixels, METH_VARARGS,
     "pixels((start, end, cls, prio), t0, t1, width, classes) -> (x0, x1, cls, covered, n, level) (capsules); None if too wide"},
    {"rows", rows, METH_VARARGS,
     "rows(keys, queries, low, span) -> row of each query in keys, -1 where absent (capsule); None if a key repeats"},
    {"chains", chains, METH_VARARGS,
     "chains((parent_row, code)) -> (chain of each row, parent chain and code of each chain) (capsules)"},
    {"up_until", up_until, METH_VARARGS,
     "up_until((parent_row, end), start_row, need, levels) -> the first row up from start with end >= need (capsule)"},
    {"tree_sums", tree_sums, METH_VARARGS,
     "tree_sums((parent_row,), (event_row, dur, kernel), levels) -> (events_self, ns_self, events_incl, kernels_incl, "
     "ns_incl) per row (capsules)"},
    {"same_above", same_above, METH_VARARGS,
     "same_above((parent_row, code), levels) -> 0/1 per row: a row above it has the same code (capsule)"},
    {"flag_up", flag_up, METH_VARARGS,
     "flag_up((parent_row, flagged), levels) -> 0/1 per row: flagged or an ancestor of a flagged row (capsule)"},
    {"climb", climb, METH_VARARGS,
     "climb((parent_row, hit, go, op), start_row, levels) -> (hit_row, op_row) per start row (capsules)"},
    {"nest", nest, METH_VARARGS, "nest(thread, ts, dur, end, eid) -> (depth, parent_eid), Arrow C stream capsules"},
    {"covered", covered, METH_VARARGS,
     "covered((group, start, end), (group, q_start, q_end), whole) -> (covered, hit) per query (capsules)"},
    {"stab", stab, METH_VARARGS,
     "stab((slice_start, slice_end), (point_at,)) -> (point index, slice index) of each pair start <= at < end (capsules)"},
    {"innermost", innermost, METH_VARARGS,
     "innermost((slice_group, slice_start, slice_end, slice_length, slice_order, permutation), (point_group, "
     "point_at)) -> slice row per point (capsule)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_slices", "Passes over slices sorted per thread.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__slices(void) { return PyModule_Create(&module); }
