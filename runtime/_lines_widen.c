/* The run-wise widening of a mad's int8 / fp16 operands to float32 (runtime.widen.widen_lines_f32):
 * widen_i8_runs and widen_f16_runs. Not a translation unit of its own: runtime/_lines.c includes
 * it where its helpers (finish, widen_buffers, run_buffers_error, FOR_EACH_RUN, MAX_DIMS, the F16C
 * test) are defined,
 * so that file stays under the 600-line limit; setup.py lists it in `depends` so an edit here
 * rebuilds the module. */

/* src's axes with the size-1 ones dropped and neighbours merged where the outer stride is the
 * inner one's span (an ND operand's rows become one run); the count. Called after
 * run_buffers_error: the innermost axis is contiguous, or of size 1 - then the runs are of one
 * item, any stride apart. */
static int merged_axes(const Py_buffer *b, Py_ssize_t *shape, Py_ssize_t *st) {
    int n = 0;
    for (int a = 0; a < b->ndim; a++) {
        if (b->shape[a] == 1)
            continue;
        if (n && st[n - 1] == b->strides[a] * b->shape[a]) {
            shape[n - 1] *= b->shape[a];
            st[n - 1] = b->strides[a];
        } else {
            shape[n] = b->shape[a];
            st[n] = b->strides[a];
            n++;
        }
    }
    if (n == 0 || st[n - 1] != b->itemsize) { /* runs of one item (a size-1 axis was dropped: room) */
        shape[n] = 1;
        st[n] = b->itemsize;
        n++;
    }
    return n;
}

PyDoc_STRVAR(widen_i8_runs_doc,
"widen_i8_runs(src, dst)\n--\n\n"
"dst[...] = float32(src): src a buffer of int8 items of at most 8 axes whose innermost axis is\n"
"contiguous (or of size 1), any other strides (an NZ operand's C0 lines); dst a C-contiguous float32 buffer of\n"
"the same shape, writable, not overlapping src. Exact (every int8 is a float32). The GIL is\n"
"released while the elements move.");

/* One run of n int8 items into float32, a scalar loop (gcc vectorises it poorly: numpy's cast of a
 * contiguous run is ~2x faster) or 16 at a time with AVX2 where the CPU has it. */
static void widen_i8_run(const int8_t *r, float *d, Py_ssize_t n) {
    for (Py_ssize_t j = 0; j < n; j++)
        d[j] = (float)r[j];
}

#ifdef HAVE_F16C_PATH
__attribute__((target("avx2"))) static void widen_i8_run_avx2(const int8_t *r, float *d, Py_ssize_t n) {
    Py_ssize_t j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m128i b = _mm_loadu_si128((const __m128i *)(r + j));
        _mm256_storeu_ps(d + j, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)));
        _mm256_storeu_ps(d + j + 8, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8))));
    }
    widen_i8_run(r + j, d + j, n - j);
}
#endif

static PyObject *widen_i8_runs(PyObject *self, PyObject *args) {
    Py_buffer src, dst;
    (void)self;
    if (widen_buffers(args, &src, &dst) < 0)
        return NULL;
    const char *error = run_buffers_error(&src, &dst, 1);
    if (error == NULL && dst.len) {
        float *d = dst.buf;
        Py_ssize_t shape[MAX_DIMS], st[MAX_DIMS];
        const int ndim = merged_axes(&src, shape, st);
        const Py_ssize_t run = shape[ndim - 1];
        void (*convert)(const int8_t *, float *, Py_ssize_t) = widen_i8_run;
#ifdef HAVE_F16C_PATH
        if (__builtin_cpu_supports("avx2"))
            convert = widen_i8_run_avx2;
#endif
        Py_BEGIN_ALLOW_THREADS
        FOR_EACH_RUN(src.buf, d, ndim, shape, st, { convert((const int8_t *)s, d, run); });
        Py_END_ALLOW_THREADS
    }
    return finish(&src, &dst, error);
}

#ifdef HAVE_F16C_PATH
/* One run of n fp16 items into float32 (F16C, exact for every finite value and inf); 0 at the
 * first NaN - the instruction quiets a signalling NaN, numpy keeps its bits - else 1. */
__attribute__((target("f16c,avx"))) static int widen_f16_run(const char *s, float *d, Py_ssize_t n) {
    const __m128i magnitude = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
    Py_ssize_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(s + 2 * j));
        /* a NaN: magnitude bits above inf's (as signed 16-bit: both are below 0x8000) */
        if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, magnitude), inf)))
            return 0;
        _mm256_storeu_ps(d + j, _mm256_cvtph_ps(h));
    }
    for (; j < n; j++) {
        uint16_t bits;
        memcpy(&bits, s + 2 * j, sizeof bits);
        if ((bits & 0x7fff) > 0x7c00)
            return 0;
        d[j] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)));
    }
    return 1;
}
#endif

PyDoc_STRVAR(widen_f16_runs_doc,
"widen_f16_runs(src, dst) -> bool\n--\n\n"
"dst[...] = float32(src): src a buffer of fp16 items (2-byte) of at most 8 axes whose innermost\n"
"axis is contiguous, any other strides; dst a C-contiguous float32 buffer of the same shape,\n"
"writable, not overlapping src. False when it did not convert everything - the CPU has no F16C,\n"
"or src holds a NaN (dst then partly written) - and the caller converts. The GIL is released\n"
"while the elements move.");

static PyObject *widen_f16_runs(PyObject *self, PyObject *args) {
    Py_buffer src, dst;
    (void)self;
    if (widen_buffers(args, &src, &dst) < 0)
        return NULL;
    const char *error = run_buffers_error(&src, &dst, 2);
    if (error != NULL)
        return finish(&src, &dst, error);
    int done = 0;
#ifdef HAVE_F16C_PATH
    if (__builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx")) {
        done = 1;
        float *d = dst.buf;
        Py_ssize_t shape[MAX_DIMS], st[MAX_DIMS];
        const int ndim = merged_axes(&src, shape, st);
        const Py_ssize_t run = shape[ndim - 1];
        if (dst.len) {
            Py_BEGIN_ALLOW_THREADS
            FOR_EACH_RUN(src.buf, d, ndim, shape, st, {
                if (!widen_f16_run(s, d, run)) {
                    done = 0;
                    break;
                }
            });
            Py_END_ALLOW_THREADS
        }
    }
#endif
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return PyBool_FromLong(done);
}

PyDoc_STRVAR(same_runs_doc,
"same_runs(src, saved, copy) -> bool\n--\n\n"
"Does saved hold src's bytes? src a buffer of at most 8 axes whose innermost axis is contiguous\n"
"(or of size 1), any other strides; saved a C-contiguous buffer of the same shape and item size\n"
"(src's items in order). With copy, src's bytes are copied into saved (writable, not\n"
"overlapping src) instead, and True is returned. A byte comparison (memcmp): a NaN is its bits.\n"
"The GIL is released while the bytes are read.");

/* The conversion cache's test (nzjit/backend/conversion_cache.py): a converted mad operand is
 * reused only while the bytes it was converted from are the bytes its GM view holds now. */
static PyObject *same_runs(PyObject *self, PyObject *args) {
    PyObject *so, *dobj;
    int copy;
    Py_buffer src, dst;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOp", &so, &dobj, &copy))
        return NULL;
    if (PyObject_GetBuffer(so, &src, PyBUF_STRIDES) < 0)
        return NULL;
    if (PyObject_GetBuffer(dobj, &dst, PyBUF_STRIDES | (copy ? PyBUF_WRITABLE : 0)) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    const char *error = NULL;
    if (src.ndim < 1 || src.ndim > MAX_DIMS || dst.ndim != src.ndim || dst.itemsize != src.itemsize)
        error = "same_runs: src and saved must have the same 1 to 8 axes and item size";
    else if (src.strides[src.ndim - 1] != src.itemsize && src.shape[src.ndim - 1] > 1)
        error = "same_runs: src's innermost axis must be contiguous";
    else if (!PyBuffer_IsContiguous(&dst, 'C'))
        error = "same_runs: saved must be C-contiguous";
    else if (copy && overlaps(&src, &dst))
        error = "same_runs: src and saved must not overlap";
    for (int a = 0; error == NULL && a < src.ndim; a++)
        if (src.shape[a] != dst.shape[a])
            error = "same_runs: src and saved must have the same shape";
    int same = 1;
    if (error == NULL && dst.len) {
        Py_ssize_t shape[MAX_DIMS], st[MAX_DIMS];
        const int ndim = merged_axes(&src, shape, st);
        shape[ndim - 1] *= src.itemsize; /* runs of bytes: d below advances by a run's bytes */
        st[ndim - 1] = 1;
        const size_t run = (size_t)shape[ndim - 1];
        char *d = dst.buf;
        Py_BEGIN_ALLOW_THREADS
        FOR_EACH_RUN(src.buf, d, ndim, shape, st, {
            if (copy)
                memcpy(d, s, run);
            else if (memcmp(d, s, run)) {
                same = 0;
                break;
            }
        });
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    if (error != NULL) {
        PyErr_SetString(PyExc_ValueError, error);
        return NULL;
    }
    return PyBool_FromLong(same);
}

PyDoc_STRVAR(address_doc,
"address(a) -> int\n--\n\n"
"The address of a's first item (a buffer of any strides): the conversion cache's key, for a\n"
"fraction of __array_interface__'s cost.");

static PyObject *address(PyObject *self, PyObject *arg) {
    Py_buffer b;
    (void)self;
    if (PyObject_GetBuffer(arg, &b, PyBUF_STRIDES) < 0)
        return NULL;
    PyObject *r = PyLong_FromVoidPtr(b.buf);
    PyBuffer_Release(&b);
    return r;
}
