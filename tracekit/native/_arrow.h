/* The Arrow C data interface (https://arrow.apache.org/docs/format/CDataInterface.html), the
 * reading of one Int64 column from an Arrow C stream capsule (the PyCapsule interface Polars
 * speaks) and the writing of one: shared by the analysis's C passes (`_slices.c`, `_paths.c`). */
#ifndef TRACEKIT_ARROW_H
#define TRACEKIT_ARROW_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

struct ArrowArrayStream {
    int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *out);
    int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *out);
    const char *(*get_last_error)(struct ArrowArrayStream *);
    void (*release)(struct ArrowArrayStream *);
    void *private_data;
};

#define ARROW_FLAG_NULLABLE 2

/* -- reading a column ------------------------------------------------------------------ */

typedef struct {
    struct ArrowArray array;
    const int64_t *values;
    int64_t length;
} Column;

static inline void drop_column(Column *c) {
    if (c->array.release) c->array.release(&c->array);
    c->array.release = NULL;
}

/* An Int64 column without nulls, in one chunk, from a capsule of an Arrow C stream.
 * 0, or -1 with an exception set. */
static inline int read_column(PyObject *capsule, Column *out) {
    memset(out, 0, sizeof *out);
    struct ArrowArrayStream *stream = PyCapsule_GetPointer(capsule, "arrow_array_stream");
    if (!stream) return -1;
    struct ArrowSchema schema = {0};
    if (stream->get_schema(stream, &schema) != 0) {
        PyErr_SetString(PyExc_ValueError, "cannot read the column's Arrow schema");
        return -1;
    }
    int int64 = schema.format && strcmp(schema.format, "l") == 0;
    if (schema.release) schema.release(&schema);
    if (!int64) {
        PyErr_SetString(PyExc_TypeError, "expected an Int64 column");
        return -1;
    }
    struct ArrowArray next = {0};
    for (;;) {
        if (stream->get_next(stream, &next) != 0) {
            drop_column(out);
            PyErr_SetString(PyExc_ValueError, "cannot read the column's Arrow arrays");
            return -1;
        }
        if (!next.release) break; /* end of the stream */
        if (next.length == 0) {
            next.release(&next);
            continue;
        }
        if (out->array.release) {
            next.release(&next);
            drop_column(out);
            PyErr_SetString(PyExc_ValueError, "expected a column in one chunk (rechunk it first)");
            return -1;
        }
        out->array = next;
        memset(&next, 0, sizeof next);
    }
    if (!out->array.release) return 0; /* empty */
    if (out->array.null_count != 0 || out->array.n_buffers != 2) {
        drop_column(out);
        PyErr_SetString(PyExc_ValueError, "expected a column without nulls");
        return -1;
    }
    out->values = (const int64_t *)out->array.buffers[1] + out->array.offset;
    out->length = out->array.length;
    return 0;
}

/* Reads `count` Int64 columns from the capsules in `args`; 0, or -1 with an exception (nothing held). */
static inline int read_columns(PyObject *args, Column *cols, int count) {
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != count) {
        PyErr_Format(PyExc_TypeError, "expected %d columns", count);
        return -1;
    }
    for (int k = 0; k < count; k++) {
        if (read_column(PyTuple_GET_ITEM(args, k), &cols[k]) < 0) {
            for (int j = 0; j < k; j++) drop_column(&cols[j]);
            return -1;
        }
        if (cols[k].length != cols[0].length) {
            for (int j = 0; j <= k; j++) drop_column(&cols[j]);
            PyErr_SetString(PyExc_ValueError, "the columns differ in length");
            return -1;
        }
    }
    return 0;
}

/* -- writing a column ------------------------------------------------------------------ */

typedef struct {
    int64_t *values;
    uint8_t *valid; /* NULL: no nulls */
    int64_t length, null_count;
    const void *buffers[2];
} Output;

/* Free an output not handed over (NULL: nothing). */
static inline void free_output(Output *o) {
    if (!o) return;
    free(o->values);
    free(o->valid);
    free(o);
}

static inline void release_schema(struct ArrowSchema *schema) { schema->release = NULL; }

static inline void release_array(struct ArrowArray *array) {
    free_output(array->private_data);
    array->release = NULL;
}

static inline int stream_schema(struct ArrowArrayStream *stream, struct ArrowSchema *out) {
    Output *o = stream->private_data;
    memset(out, 0, sizeof *out);
    out->format = "l";
    out->name = "";
    out->flags = o && o->valid ? ARROW_FLAG_NULLABLE : 0;
    out->release = release_schema;
    return 0;
}

static inline int stream_next(struct ArrowArrayStream *stream, struct ArrowArray *out) {
    Output *o = stream->private_data;
    memset(out, 0, sizeof *out);
    if (!o) return 0; /* given already: the end (release stays NULL) */
    o->buffers[0] = o->valid;
    o->buffers[1] = o->values;
    out->length = o->length;
    out->null_count = o->null_count;
    out->n_buffers = 2;
    out->buffers = o->buffers;
    out->release = release_array;
    out->private_data = o;
    stream->private_data = NULL; /* the array owns it now */
    return 0;
}

static inline const char *stream_error(struct ArrowArrayStream *stream) { return NULL; }

static inline void release_stream(struct ArrowArrayStream *stream) {
    free_output(stream->private_data);
    stream->private_data = NULL;
    stream->release = NULL;
}

/* PyCapsule destructors of the Arrow C structs: the struct is released, unless its
 * consumer took it over (its `release` is then NULL), and freed. */
#define ARROW_CAPSULE_DESTRUCTOR(fn, type, capsule_name)             \
    static inline void fn(PyObject *capsule) {                       \
        struct type *p = PyCapsule_GetPointer(capsule, capsule_name); \
        if (!p) {                                                    \
            PyErr_Clear();                                           \
            return;                                                  \
        }                                                            \
        if (p->release) p->release(p);                               \
        free(p);                                                     \
    }

ARROW_CAPSULE_DESTRUCTOR(free_capsule, ArrowArrayStream, "arrow_array_stream")
ARROW_CAPSULE_DESTRUCTOR(free_schema_capsule, ArrowSchema, "arrow_schema")
ARROW_CAPSULE_DESTRUCTOR(free_array_capsule, ArrowArray, "arrow_array")

/* A capsule of an Arrow C stream holding `o` (taken over, also on failure). */
static inline PyObject *column_capsule(Output *o) {
    struct ArrowArrayStream *stream = calloc(1, sizeof *stream);
    if (!stream) {
        free_output(o);
        return PyErr_NoMemory();
    }
    stream->get_schema = stream_schema;
    stream->get_next = stream_next;
    stream->get_last_error = stream_error;
    stream->release = release_stream;
    stream->private_data = o;
    PyObject *capsule = PyCapsule_New(stream, "arrow_array_stream", free_capsule);
    if (!capsule) {
        release_stream(stream);
        free(stream);
    }
    return capsule;
}

static inline Output *new_output(int64_t length, int nullable) {
    Output *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->length = length;
    o->values = malloc((size_t)(length ? length : 1) * sizeof(int64_t));
    o->valid = nullable ? calloc((size_t)(length / 8 + 1), 1) : NULL;
    if (!o->values || (nullable && !o->valid)) {
        free_output(o);
        return NULL;
    }
    return o;
}

#endif
