/* Longest paths over a DAG's edge arrays: the two loops of `tracekit.analysis.longest`.
 *
 * The same programme as `longest.longest_path` and `longest.longest_weight`, step for
 * step, on C arrays: the edges come as three columns (source position, target position,
 * weight: Int64 Arrow C stream capsules, or sequences of ints), sorted by target position as
 * `longest.EdgeOrder` keeps them. The
 * Python functions stay the reference; these give the same answers, ties included.
 *
 * Indices out of range raise IndexError; a weight or a sum that does not fit in 64 bits
 * raises OverflowError (the caller then takes the Python loop, which has no such limit).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

#include "_arrow.h"

/* The values of an Int64 Arrow column (a capsule of an Arrow C stream), copied; NULL with an
 * exception set. */
static int64_t *read_arrow(PyObject *capsule, Py_ssize_t *len) {
    Column col;
    if (read_column(capsule, &col) < 0) return NULL;
    int64_t *out = malloc((size_t)(col.length ? col.length : 1) * sizeof(int64_t));
    if (!out) {
        drop_column(&col);
        PyErr_NoMemory();
        return NULL;
    }
    if (col.length) memcpy(out, col.values, (size_t)col.length * sizeof(int64_t));
    *len = (Py_ssize_t)col.length;
    drop_column(&col);
    return out;
}

/* The items of a sequence of ints, or of an Int64 Arrow column, as int64; NULL with an
 * exception set. */
static int64_t *read_ints(PyObject *seq, Py_ssize_t *len) {
    if (PyCapsule_CheckExact(seq)) return read_arrow(seq, len);
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of ints");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    int64_t *out = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!out) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(items[i]);
        if (v == -1 && PyErr_Occurred()) {
            free(out);
            Py_DECREF(fast);
            return NULL;
        }
        out[i] = (int64_t)v;
    }
    Py_DECREF(fast);
    *len = n;
    return out;
}

typedef struct {
    int64_t *src, *dst, *w;
    Py_ssize_t edges;
} Edges;

static void free_edges(Edges *e) {
    free(e->src);
    free(e->dst);
    free(e->w);
}

/* Reads the three sequences (of one length, positions in [0, nodes)); 0 or -1 with an exception. */
static int read_edges(PyObject *src, PyObject *dst, PyObject *w, Py_ssize_t nodes, Edges *e) {
    Py_ssize_t ns = 0, nd = 0, nw = 0;
    e->src = read_ints(src, &ns);
    e->dst = e->src ? read_ints(dst, &nd) : NULL;
    e->w = e->dst ? read_ints(w, &nw) : NULL;
    if (!e->w) {
        free_edges(e);
        return -1;
    }
    if (ns != nd || ns != nw) {
        free_edges(e);
        PyErr_SetString(PyExc_ValueError, "src, dst and weights differ in length");
        return -1;
    }
    for (Py_ssize_t i = 0; i < ns; i++) {
        if (e->src[i] < 0 || e->src[i] >= nodes || e->dst[i] < 0 || e->dst[i] >= nodes) {
            free_edges(e);
            PyErr_SetString(PyExc_IndexError, "edge position out of range");
            return -1;
        }
    }
    e->edges = ns;
    return 0;
}

static PyObject *overflow(void) {
    PyErr_SetString(PyExc_OverflowError, "path weight does not fit in 64 bits");
    return NULL;
}

/* longest_weight(src, dst, weights, nodes) -> int */
static PyObject *longest_weight(PyObject *self, PyObject *args) {
    PyObject *src, *dst, *w;
    Py_ssize_t nodes;
    if (!PyArg_ParseTuple(args, "OOOn", &src, &dst, &w, &nodes)) return NULL;
    if (nodes < 0) {
        PyErr_SetString(PyExc_ValueError, "nodes must be >= 0");
        return NULL;
    }
    Edges e;
    if (read_edges(src, dst, w, nodes, &e) < 0) return NULL;
    int64_t *dist = calloc((size_t)(nodes ? nodes : 1), sizeof(int64_t));
    if (!dist) {
        free_edges(&e);
        return PyErr_NoMemory();
    }
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < e.edges; i++) {
        int64_t v;
        if (__builtin_add_overflow(dist[e.src[i]], e.w[i], &v)) {
            bad = 1;
            break;
        }
        if (v > dist[e.dst[i]]) dist[e.dst[i]] = v;
    }
    Py_END_ALLOW_THREADS
    int64_t best = 0;
    for (Py_ssize_t i = 0; i < nodes; i++)
        if (i == 0 || dist[i] > best) best = dist[i];
    free(dist);
    free_edges(&e);
    if (bad) return overflow();
    return PyLong_FromLongLong(best);
}

/* longest_path(src, dst, weights, nodes) -> (positions on the path: an Int64 Arrow C stream
 * capsule, weight) */
static PyObject *longest_path(PyObject *self, PyObject *args) {
    PyObject *src, *dst, *w;
    Py_ssize_t nodes;
    if (!PyArg_ParseTuple(args, "OOOn", &src, &dst, &w, &nodes)) return NULL;
    if (nodes <= 0) {
        PyErr_SetString(PyExc_ValueError, "nodes must be > 0");
        return NULL;
    }
    Edges e;
    if (read_edges(src, dst, w, nodes, &e) < 0) return NULL;
    int64_t *dist = calloc((size_t)nodes, sizeof(int64_t));
    Py_ssize_t *back = calloc((size_t)nodes, sizeof(Py_ssize_t));
    if (!dist || !back) {
        free(dist);
        free(back);
        free_edges(&e);
        return PyErr_NoMemory();
    }
    int bad = 0;
    Py_ssize_t end = 0, length = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < nodes; i++) back[i] = i;
    Py_ssize_t cur = -1;
    for (Py_ssize_t i = 0; i < e.edges; i++) {
        Py_ssize_t s = (Py_ssize_t)e.src[i], d = (Py_ssize_t)e.dst[i];
        int first = d != cur;
        if (first) { /* first edge into d: every node before it is final, settle the last one */
            if (cur >= 0 && dist[cur] < 0) {
                dist[cur] = 0;
                back[cur] = cur;
            }
            cur = d;
        }
        int64_t v;
        if (__builtin_add_overflow(dist[s], e.w[i], &v)) {
            bad = 1;
            break;
        }
        if (first || v > dist[d]) {
            dist[d] = v;
            back[d] = s;
        }
    }
    if (!bad && cur >= 0 && dist[cur] < 0) {
        dist[cur] = 0;
        back[cur] = cur;
    }
    for (Py_ssize_t i = 1; i < nodes; i++) /* the first node of the largest distance */
        if (dist[i] > dist[end]) end = i;
    length = 1;
    /* a cycle in `back` cannot happen for edges sorted by target with src < dst; bound the walk anyway */
    for (Py_ssize_t p = end; back[p] != p && length <= nodes; p = back[p]) length++;
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    if (bad) {
        overflow();
    } else if (length > nodes) {
        PyErr_SetString(PyExc_ValueError, "the chosen predecessors form a cycle (edges not in topological order)");
    } else {
        /* the positions as an Arrow column: as a list, the 1 GB trace's 4.4M positions were
         * as many Python ints (0.17 GB) */
        Output *path = new_output(length, 0);
        if (!path) {
            PyErr_NoMemory();
        } else {
            Py_ssize_t p = end;
            for (Py_ssize_t k = length - 1; k >= 0; k--, p = back[p]) path->values[k] = (int64_t)p;
            PyObject *capsule = column_capsule(path); /* (takes `path` over, also on failure) */
            if (capsule) out = Py_BuildValue("(NL)", capsule, (long long)dist[end]);
        }
    }
    free(dist);
    free(back);
    free_edges(&e);
    return out;
}

static PyMethodDef methods[] = {
    {"longest_weight", longest_weight, METH_VARARGS, "longest_weight(src, dst, weights, nodes) -> int"},
    {"longest_path", longest_path, METH_VARARGS,
     "longest_path(src, dst, weights, nodes) -> (positions: an Int64 Arrow C stream capsule, weight)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_paths", "Longest paths over edge arrays.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__paths(void) { return PyModule_Create(&module); }
