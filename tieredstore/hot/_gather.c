/* tieredstore.hot._gather: byte runs of buffers copied into one new bytearray, or into
 * the caller's buffer.
 *
 * The native half of HotCommitlog.gather (tieredstore/hot/commitlog.py: copy_parts),
 * which keeps the pure-Python reference (a memoryview per run, joined) that the tests
 * compare it with byte for byte. A queue's records interleave with other queues'
 * records in the commit log, so a block of 4,096 records is thousands of runs: in
 * Python each costs a slice and a join step (about 0.25 us), here a memcpy. The copy
 * runs with the GIL released, into one allocation however many files the runs are in.
 *
 * gather(parts) -> bytearray
 *     parts: a list or tuple of (source, starts, ends): source any object exporting a
 *     contiguous buffer (bytes, bytearray, mmap, ...); starts, ends contiguous buffers
 *     of native int64 (numpy int64 arrays), one entry per run, [starts[i], ends[i])
 *     inside source. Runs may be in any order and may overlap: each is copied as
 *     asked, back to back, part after part.
 *     Raises ValueError for a run outside its source or ending before it starts, or for
 *     starts and ends of different lengths or not whole int64s; TypeError for parts
 *     that are not (source, starts, ends) triples or an object without a buffer.
 *
 * gather_into(parts, out) -> int
 *     The same runs copied to the start of ``out`` (a writable contiguous buffer, none
 *     of the sources: a reader that reuses one buffer does not fault fresh pages in for
 *     each copy); returns the bytes copied. Raises as gather does, and ValueError when
 *     the runs add up to more than ``out`` holds (nothing is copied then).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* One part's buffers, held from the checks to the end of the copy. */
typedef struct {
    Py_buffer source, starts, ends;
    Py_ssize_t runs;
    int held; /* how many of the three buffers are held */
} Part;

static void
release(Part *part)
{
    if (part->held > 2) PyBuffer_Release(&part->ends);
    if (part->held > 1) PyBuffer_Release(&part->starts);
    if (part->held > 0) PyBuffer_Release(&part->source);
    part->held = 0;
}

static int64_t
at(const Py_buffer *view, Py_ssize_t i)
{
    int64_t value;
    memcpy(&value, (const char *)view->buf + i * (Py_ssize_t)sizeof value, sizeof value);
    return value;
}

static int
int64s(const Py_buffer *view, Py_ssize_t index, const char *what)
{
    if (view->len % (Py_ssize_t)sizeof(int64_t) != 0) {
        PyErr_Format(PyExc_ValueError, "part %zd: %s is not a buffer of int64s (%zd bytes)",
                     index, what, view->len);
        return -1;
    }
    return 0;
}

/* Hold part ``index``'s buffers and check its runs; add their bytes to *total. */
static int
hold(PyObject *item, Py_ssize_t index, Part *part, int64_t *total)
{
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
        PyErr_Format(PyExc_TypeError, "part %zd is not a (source, starts, ends) tuple", index);
        return -1;
    }
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 0), &part->source, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    part->held = 1;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 1), &part->starts, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    part->held = 2;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 2), &part->ends, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    part->held = 3;
    if (int64s(&part->starts, index, "starts") < 0 || int64s(&part->ends, index, "ends") < 0)
        return -1;
    part->runs = part->starts.len / (Py_ssize_t)sizeof(int64_t);
    if (part->ends.len != part->starts.len) {
        PyErr_Format(PyExc_ValueError, "part %zd: %zd starts but %zd ends", index, part->runs,
                     part->ends.len / (Py_ssize_t)sizeof(int64_t));
        return -1;
    }
    for (Py_ssize_t i = 0; i < part->runs; i++) {
        const int64_t lo = at(&part->starts, i), hi = at(&part->ends, i);
        if (lo < 0 || hi < lo || hi > (int64_t)part->source.len) {
            PyErr_Format(PyExc_ValueError,
                         "part %zd: run %zd is [%lld, %lld), not inside a buffer of %zd bytes",
                         index, i, (long long)lo, (long long)hi, part->source.len);
            return -1;
        }
        if (hi - lo > (int64_t)PY_SSIZE_T_MAX - *total) {
            PyErr_SetString(PyExc_OverflowError, "the runs add up to more than a bytearray holds");
            return -1;
        }
        *total += hi - lo;
    }
    return 0;
}

/* Hold every part of the sequence ``arg``; *parts (to free with drop()) and *total. */
static PyObject *
hold_all(PyObject *arg, Part **parts, int64_t *total)
{
    PyObject *seq = PySequence_Fast(arg, "gather() takes a list or tuple of parts");
    if (seq == NULL) return NULL;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    *parts = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(Part));
    if (*parts == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        if (hold(PySequence_Fast_GET_ITEM(seq, k), k, &(*parts)[k], total) < 0) return seq;
    }
    return seq;
}

static void
drop(PyObject *seq, Part *parts)
{
    if (parts != NULL) {
        for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) release(&parts[k]);
        PyMem_Free(parts);
    }
    Py_DECREF(seq);
}

/* Copy every run, back to back, to dst (the GIL released). */
static void
copy_runs(const Part *parts, Py_ssize_t n, char *dst)
{
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        const char *src = (const char *)parts[k].source.buf;
        for (Py_ssize_t i = 0; i < parts[k].runs; i++) {
            const int64_t lo = at(&parts[k].starts, i), hi = at(&parts[k].ends, i);
            if (hi > lo) { /* an empty run's source may be a NULL buffer */
                memcpy(dst, src + lo, (size_t)(hi - lo));
                dst += hi - lo;
            }
        }
    }
    Py_END_ALLOW_THREADS
}

static PyObject *
gather(PyObject *module, PyObject *arg)
{
    (void)module;
    Part *parts = NULL;
    int64_t total = 0;
    PyObject *seq = hold_all(arg, &parts, &total);
    if (seq == NULL) return NULL;
    PyObject *out = NULL;
    if (!PyErr_Occurred()) {
        out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)total);
        if (out != NULL) copy_runs(parts, PySequence_Fast_GET_SIZE(seq), PyByteArray_AS_STRING(out));
    }
    drop(seq, parts);
    return out;
}

static PyObject *
gather_into(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *arg, *target;
    if (!PyArg_ParseTuple(args, "OO:gather_into", &arg, &target)) return NULL;
    Part *parts = NULL;
    int64_t total = 0;
    PyObject *seq = hold_all(arg, &parts, &total);
    if (seq == NULL) return NULL;
    PyObject *result = NULL;
    Py_buffer out;
    if (!PyErr_Occurred()
        && PyObject_GetBuffer(target, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) == 0) {
        if (total > (int64_t)out.len) {
            PyErr_Format(PyExc_ValueError,
                         "the runs add up to %lld bytes, more than the %zd of the buffer",
                         (long long)total, out.len);
        } else {
            copy_runs(parts, PySequence_Fast_GET_SIZE(seq), (char *)out.buf);
            result = PyLong_FromLongLong((long long)total);
        }
        PyBuffer_Release(&out);
    }
    drop(seq, parts);
    return result;
}

static PyMethodDef methods[] = {
    {"gather", gather, METH_O,
     "gather(parts) -> bytearray: each part's runs [starts[i], ends[i]) of its source, "
     "back to back (parts: (source, starts, ends) tuples, int64 buffers)."},
    {"gather_into", gather_into, METH_VARARGS,
     "gather_into(parts, out) -> int: gather's runs copied to the start of the writable "
     "buffer out; the bytes copied."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "tieredstore.hot._gather",
    "Byte runs of buffers copied into one new bytearray or the caller's (see _gather.c).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__gather(void)
{
    return PyModule_Create(&module);
}
