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

/* One run of n bf16 items (their bits, uint16) into float32 bits: shifted up by 16, exact for
 * every pattern (NaNs included). The scalar loop (gcc vectorises it for SSE2, 4 a step) or AVX2,
 * 8 a step, where the CPU has it: the same bits either way. */
static inline void widen_bf16_run(const char *s, uint32_t *d, Py_ssize_t n) {
    for (Py_ssize_t j = 0; j < n; j++) {
        uint16_t bits;
        memcpy(&bits, s + 2 * j, sizeof bits); /* any alignment; a plain load */
        d[j] = (uint32_t)bits << 16;
    }
}

#ifdef HAVE_F16C_PATH
__attribute__((target("avx2"))) static inline void widen_bf16_run_avx2(const char *s, uint32_t *d, Py_ssize_t n) {
    Py_ssize_t j = 0;
    for (; j + 16 <= n; j += 16) { /* a C0 line (32 bytes) a step */
        const __m128i lo = _mm_loadu_si128((const __m128i *)(s + 2 * j));
        const __m128i hi = _mm_loadu_si128((const __m128i *)(s + 2 * j + 16));
        _mm256_storeu_si256((__m256i *)(d + j), _mm256_slli_epi32(_mm256_cvtepu16_epi32(lo), 16));
        _mm256_storeu_si256((__m256i *)(d + j + 8), _mm256_slli_epi32(_mm256_cvtepu16_epi32(hi), 16));
    }
    widen_bf16_run(s + 2 * j, d + j, n - j);
}
#endif

/* The runs of dst's rows in bands of RUN_BAND rows: an NZ operand read as the mad's rows takes a
 * row's runs from column blocks far apart (64 KiB for a 2048-row weight: one L2 set on an 8-way
 * 512 KiB L2), and a 64-byte line holds the runs of two neighbouring rows; row by row, 16 runs
 * evict each other before the next row reads the line's other half. A band of rows reads each
 * column block's lines whole, and writes RUN_BAND rows that stay in L1. Axis p = ndim - 3 (the
 * rows) is cut in bands, axis k = ndim - 2 (the runs of a row) walked inside each band. A
 * grouped bf16 prefill's 16-lane Right chunk (16 x 128 rows of 16 runs 64 KiB apart): 25-35%
 * less time than row by row in cache, 0-28% streamed from memory as a call reads them; bands of
 * 8 to 128 rows alike (32 kept). */
#define RUN_BAND 32
/* Rows of at most this many runs go row by row: their runs fit the 8 ways of a cache set, and a
 * decode kernel's 8-run rows streamed from memory took 10-40% longer in bands. */
#define BAND_FROM_RUNS 8
static void widen_bf16_banded(const char *src, uint32_t *dst, int ndim, const Py_ssize_t *shape,
                              const Py_ssize_t *st, int avx2) {
    const int p = ndim - 3, k = ndim - 2;
    const Py_ssize_t run = shape[ndim - 1], rows = shape[p], runs = shape[k], row = runs * run;
    Py_BEGIN_ALLOW_THREADS
    /* the axes before p as an odometer of their own: each step one plane of rows x runs */
    Py_ssize_t outer = 1, idx[MAX_DIMS] = {0};
    for (int a = 0; a < p; a++)
        outer *= shape[a];
    const char *s0 = src;
    uint32_t *d0 = dst;
    for (Py_ssize_t o = 0; o < outer; o++) {
        for (Py_ssize_t i0 = 0; i0 < rows; i0 += RUN_BAND) {
            const Py_ssize_t i1 = i0 + RUN_BAND < rows ? i0 + RUN_BAND : rows;
            for (Py_ssize_t j = 0; j < runs; j++) {
                const char *s = s0 + i0 * st[p] + j * st[k];
                uint32_t *d = d0 + i0 * row + j * run;
                for (Py_ssize_t i = i0; i < i1; i++, s += st[p], d += row) {
#ifdef HAVE_F16C_PATH
                    if (avx2)
                        widen_bf16_run_avx2(s, d, run);
                    else
#endif
                        widen_bf16_run(s, d, run);
                }
            }
        }
        d0 += rows * row;
        for (int a = p - 1; a >= 0; a--) {
            s0 += st[a];
            if (++idx[a] < shape[a])
                break;
            s0 -= shape[a] * st[a];
            idx[a] = 0;
        }
    }
    Py_END_ALLOW_THREADS
}

PyDoc_STRVAR(widen_bf16_runs_doc,
"widen_bf16_runs(src, dst, baseline=False)\n--\n\n"
"dst[...] = src << 16 (bf16 bits to float32 bits): src a buffer of 2-byte items of at most 8 axes\n"
"whose innermost axis is contiguous (or of size 1), any other strides (an NZ operand's C0 lines,\n"
"an ND operand's rows); dst a C-contiguous buffer of 4-byte items of the same shape, writable, not\n"
"overlapping src. The axes are merged here (an ND operand's rows become one run). baseline: the\n"
"scalar loop even where the CPU has AVX2 (for tests: the same bits either way). The GIL is\n"
"released while the elements move.");

static PyObject *widen_bf16_runs(PyObject *self, PyObject *args) {
    PyObject *so, *dobj;
    int baseline = 0;
    Py_buffer src, dst;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO|p", &so, &dobj, &baseline))
        return NULL;
    if (PyObject_GetBuffer(so, &src, PyBUF_STRIDES) < 0)
        return NULL;
    if (PyObject_GetBuffer(dobj, &dst, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    const char *error = run_buffers_error(&src, &dst, 2);
    if (error == NULL && dst.len) {
        uint32_t *d = dst.buf;
        Py_ssize_t shape[MAX_DIMS], st[MAX_DIMS];
        const int ndim = merged_axes(&src, shape, st);
        const Py_ssize_t run = shape[ndim - 1];
        int avx2 = 0;
#ifdef HAVE_F16C_PATH
        avx2 = !baseline && __builtin_cpu_supports("avx2");
#endif
        /* a row's runs further apart than its rows, and more of them than a cache set has ways */
        if (ndim >= 3 && st[ndim - 2] > st[ndim - 3] && shape[ndim - 2] > BAND_FROM_RUNS) {
            widen_bf16_banded(src.buf, d, ndim, shape, st, avx2);
            return finish(&src, &dst, error);
        }
        Py_BEGIN_ALLOW_THREADS
        /* one loop per variant, each run's conversion inlined: a call through a pointer per
         * 16-element run cost more than the conversion */
        if (avx2) {
#ifdef HAVE_F16C_PATH
            FOR_EACH_RUN(src.buf, d, ndim, shape, st, { widen_bf16_run_avx2(s, d, run); });
#endif
        } else {
            FOR_EACH_RUN(src.buf, d, ndim, shape, st, { widen_bf16_run(s, d, run); });
        }
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
