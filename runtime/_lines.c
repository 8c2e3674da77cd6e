/* runtime._lines: the NZ permutation of 32-byte C0 lines, compiled (used by runtime/nz.py).
 *
 * pack_nz / unpack_nz swap the last two axes of an array of 32-byte lines:
 * src[b, i, j] -> dst[b, j, i].  numpy can only do that one line per element of a strided copy
 * or a gather, and its per-element dispatch, not the memory, then bounds the bandwidth (about
 * 0.45x of np.copyto for an 8 MiB plane in cache).  This loop moves bands of BAND source rows:
 * for each j, the BAND lines src[b, i0 .. i0 + BAND, j] (BAND streams read in order) go to one
 * contiguous run dst[b, j, i0 .. i0 + BAND].  The band's rows stay in L1 from one j to the next,
 * so every cache line is fetched once, whatever power-of-two stride the plane has.
 *
 * The build is optional (setup.py): without a C compiler nz.py keeps its numpy copies, which
 * write the same bytes.  Only the bytes move; their meaning is the caller's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define LINE 32
#define BAND 8 /* source rows per band: 8 x 4 KiB strides still fit the L1's 8 ways */

/* Source rows [i_lo, i_hi) of every plane: a caller may share the rows of one call among threads,
 * each writing its own lines of dst. */
static void swap_rows(const char *src, char *dst, Py_ssize_t planes, Py_ssize_t n_i, Py_ssize_t n_j,
                      Py_ssize_t i_lo, Py_ssize_t i_hi) {
    const Py_ssize_t plane = n_i * n_j * LINE, row = n_j * LINE;
    for (Py_ssize_t b = 0; b < planes; b++) {
        const char *s_b = src + b * plane;
        char *d_b = dst + b * plane;
        for (Py_ssize_t i0 = i_lo; i0 < i_hi; i0 += BAND) {
            const Py_ssize_t rows = i_hi - i0 < BAND ? i_hi - i0 : BAND;
            for (Py_ssize_t j = 0; j < n_j; j++) {
                const char *s = s_b + i0 * row + j * LINE;
                char *d = d_b + (j * n_i + i0) * LINE;
                for (Py_ssize_t i = 0; i < rows; i++)
                    memcpy(d + i * LINE, s + i * row, LINE); /* a constant size: inlined moves */
            }
        }
    }
}

PyDoc_STRVAR(swap_doc,
"swap(src, dst, planes, n_i, n_j, i_lo, i_hi)\n--\n\n"
"Copy the 32-byte lines src[b, i, j] to dst[b, j, i] for i_lo <= i < i_hi and every b, j.\n"
"src and dst: C-contiguous buffers of planes * n_i * n_j lines, not overlapping; dst writable.\n"
"The GIL is released while the lines move.");

static PyObject *swap(PyObject *self, PyObject *args) {
    Py_buffer src, dst;
    Py_ssize_t planes, n_i, n_j, i_lo, i_hi;
    (void)self;
    /* y* / w*: contiguous buffers (an exporter refuses a strided one), w* also writable */
    if (!PyArg_ParseTuple(args, "y*w*nnnnn", &src, &dst, &planes, &n_i, &n_j, &i_lo, &i_hi))
        return NULL;
    const char *error = NULL;
    if (planes < 0 || n_i < 0 || n_j < 0 || i_lo < 0 || i_lo > i_hi || i_hi > n_i)
        error = "swap: planes, n_i, n_j must be >= 0 and 0 <= i_lo <= i_hi <= n_i";
    else if (n_i && n_j && planes > PY_SSIZE_T_MAX / LINE / n_i / n_j)
        error = "swap: planes * n_i * n_j lines overflow";
    else if (src.len != planes * n_i * n_j * LINE || dst.len != src.len)
        error = "swap: src and dst must each hold planes * n_i * n_j 32-byte lines";
    else if ((const char *)dst.buf < (const char *)src.buf + src.len &&
             (const char *)src.buf < (const char *)dst.buf + dst.len && src.len)
        error = "swap: src and dst must not overlap";
    if (error == NULL) {
        Py_BEGIN_ALLOW_THREADS
        swap_rows(src.buf, dst.buf, planes, n_i, n_j, i_lo, i_hi);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    if (error != NULL) {
        PyErr_SetString(PyExc_ValueError, error);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"swap", swap, METH_VARARGS, swap_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "runtime._lines",
    "The NZ permutation of 32-byte lines, compiled (see runtime/nz.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lines(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "BAND", BAND) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
