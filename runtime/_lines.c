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
 *
 * widen_bf16 (used by runtime/widen.py): bf16 -> float32 bit patterns (a 16-bit shift, exact
 * for every pattern) of a strided 3-D view into a C-contiguous array - the transposing case,
 * where the destination's rows run across the source's rows (an ND [K, N] weight read as the
 * mad's N x K operand).  numpy casts such a view one element per strided step (~1.4 ns an
 * element here); this loop takes BLOCK destination columns at a time, so their BLOCK source
 * rows stay in L1 while every destination row gets one 64-byte run.
 *
 * lookup16 (used by runtime/widen.py): dst[i] = table[src[i]] for 2-byte items, a 65536-entry
 * table of 4-byte results - fp16 -> float32 with the table numpy's own cast made, so the bits
 * are numpy's by construction; numpy converts fp16 one element at a time (~2 ns an element here).
 *
 * widen_bf16_runs (in _lines_widen.c): the same widening of a view whose innermost axis is
 * contiguous - a mad operand gathered from NZ C0 lines, 16 bf16 a line - in one pass, rows in
 * bands. numpy's shift of such a view dispatches its inner loop once per 16-element line.
 *
 * narrow_f16 (used by runtime/rounding.py): float32 -> fp16 rounded to nearest even by the F16C
 * instruction, where the CPU has it: numpy converts one element at a time (~5 ns an element
 * here). A NaN or an overflow stops it (numpy's NaN bits and overflow warning are the caller's
 * path); the other values round as IEEE 754 says, as numpy's conversion does
 * (tests/runtime/test_narrow_f16.py).
 *
 * tree_sum (used by runtime/vector.py, TROWSUM's rounded binary tree): each row of a float32 view
 * summed level by level, element i + the element half a level on (an odd level's last element
 * carried on), every level rounded to fp16 or bf16 when asked (round to nearest even) - the same
 * float adds in the same pairs as the numpy loop there, so the same bits. numpy's level-by-level
 * adds on views of one buffer copy their operands (its overlap test cannot prove the halves
 * apart), about 3x the time of this loop, which keeps a row's levels in two small buffers. The loop
 * is compiled for SSE2 and for AVX2 (picked at run time; 8 adds a vector: a 256x1024 fp32 sum
 * 48 -> 23 us, the same bits - the same IEEE adds, no FMA, no reassociation).
 * A row whose sum is NaN is reported (the caller redoes it with numpy: which NaN payload comes
 * out of two NaN operands is the ufunc's choice, not one this loop promises).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
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

/* Both calls end here: the buffers released, then None or a ValueError of `error`. */
static PyObject *finish(Py_buffer *src, Py_buffer *dst, const char *error) {
    PyBuffer_Release(src);
    PyBuffer_Release(dst);
    if (error != NULL) {
        PyErr_SetString(PyExc_ValueError, error);
        return NULL;
    }
    Py_RETURN_NONE;
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
    return finish(&src, &dst, error);
}

#define BLOCK 16 /* destination columns per pass: BLOCK source rows held in L1 */

static void widen_rows(const char *src, uint32_t *dst, const Py_ssize_t *shape, const Py_ssize_t *st) {
    const Py_ssize_t U = shape[0], I = shape[1], J = shape[2];
    for (Py_ssize_t u = 0; u < U; u++) {
        const char *s_u = src + u * st[0];
        uint32_t *d_u = dst + u * I * J;
        for (Py_ssize_t j0 = 0; j0 < J; j0 += BLOCK) {
            const Py_ssize_t nj = J - j0 < BLOCK ? J - j0 : BLOCK;
            for (Py_ssize_t i = 0; i < I; i++) {
                const char *s = s_u + i * st[1] + j0 * st[2];
                uint32_t *d = d_u + i * J + j0;
                for (Py_ssize_t j = 0; j < nj; j++) {
                    uint16_t bits;
                    memcpy(&bits, s + j * st[2], sizeof bits); /* any alignment */
                    d[j] = (uint32_t)bits << 16;
                }
            }
        }
    }
}

/* The two buffers of a widening call: src (any strides) and dst (C-contiguous, writable); -1 with
 * the exception set (and nothing held) when either is refused. */
static int widen_buffers(PyObject *args, Py_buffer *src, Py_buffer *dst) {
    PyObject *so, *dobj;
    if (!PyArg_ParseTuple(args, "OO", &so, &dobj))
        return -1;
    if (PyObject_GetBuffer(so, src, PyBUF_STRIDES) < 0)
        return -1;
    if (PyObject_GetBuffer(dobj, dst, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(src);
        return -1;
    }
    return 0;
}

/* Does dst share a byte with the range src reads? (src's strides may be negative.) */
static int overlaps(const Py_buffer *src, const Py_buffer *dst) {
    if (!src->len || !dst->len)
        return 0;
    const char *lo = src->buf, *hi = src->buf;
    for (int a = 0; a < src->ndim; a++) {
        const Py_ssize_t reach = (src->shape[a] - 1) * src->strides[a];
        if (reach < 0) lo += reach; else hi += reach;
    }
    hi += src->itemsize;
    return (const char *)dst->buf < hi && lo < (const char *)dst->buf + dst->len;
}

PyDoc_STRVAR(widen_bf16_doc,
"widen_bf16(src, dst)\n--\n\n"
"dst[u, i, j] = src[u, i, j] << 16: src a 3-D buffer of 2-byte items, any strides; dst a\n"
"C-contiguous 3-D buffer of 4-byte items of the same shape, writable, not overlapping src.\n"
"The GIL is released while the elements move.");

static PyObject *widen_bf16(PyObject *self, PyObject *args) {
    Py_buffer src, dst;
    (void)self;
    if (widen_buffers(args, &src, &dst) < 0)
        return NULL;
    const char *error = NULL;
    if (src.ndim != 3 || dst.ndim != 3 || src.itemsize != 2 || dst.itemsize != 4)
        error = "widen_bf16: src and dst must be 3-D, of 2- and 4-byte items";
    else if (src.shape[0] != dst.shape[0] || src.shape[1] != dst.shape[1] || src.shape[2] != dst.shape[2])
        error = "widen_bf16: src and dst must have the same shape";
    else if (overlaps(&src, &dst))
        error = "widen_bf16: src and dst must not overlap";
    if (error == NULL && dst.len) {
        Py_BEGIN_ALLOW_THREADS
        widen_rows(src.buf, dst.buf, src.shape, src.strides);
        Py_END_ALLOW_THREADS
    }
    return finish(&src, &dst, error);
}

PyDoc_STRVAR(lookup16_doc,
"lookup16(src, dst, table)\n--\n\n"
"dst[i] = table[src[i]]: src a C-contiguous buffer of 2-byte items, dst a writable C-contiguous\n"
"buffer of as many 4-byte items, not overlapping src, table a C-contiguous buffer of 65536\n"
"4-byte items. The GIL is released while the elements move.");

static PyObject *lookup16(PyObject *self, PyObject *args) {
    PyObject *so, *dobj, *tobj;
    Py_buffer src, dst, table;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOO", &so, &dobj, &tobj))
        return NULL;
    if (PyObject_GetBuffer(tobj, &table, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(so, &src, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&table);
        return NULL;
    }
    if (PyObject_GetBuffer(dobj, &dst, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&table);
        PyBuffer_Release(&src);
        return NULL;
    }
    const char *error = NULL;
    const Py_ssize_t n = src.len / 2;
    if (src.len % 2 || dst.len != 4 * n || table.len != 4 * 65536)
        error = "lookup16: src of 2-byte items, dst of as many 4-byte items, a table of 65536 4-byte items";
    else if ((const char *)dst.buf < (const char *)src.buf + src.len && (const char *)src.buf < (const char *)dst.buf + dst.len)
        error = "lookup16: src and dst must not overlap";
    if (error == NULL && n) {
        const uint16_t *s = src.buf;
        uint32_t *d = dst.buf;
        const uint32_t *t = table.buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++)
            d[i] = t[s[i]];
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&table);
    return finish(&src, &dst, error);
}

#define MAX_DIMS 8

/* The outer axes of a run-wise conversion: every axis but the innermost walked as an odometer,
 * `body(s, d)` converting one run of shape[ndim-1] items from s into d (d advancing by a run). */
#define FOR_EACH_RUN(src, dst, ndim, shape, st, body)                                             \
    do {                                                                                          \
        Py_ssize_t outer_ = 1, idx_[MAX_DIMS] = {0};                                              \
        for (int a_ = 0; a_ < (ndim) - 1; a_++)                                                   \
            outer_ *= (shape)[a_];                                                                \
        const char *s = (src);                                                                    \
        for (Py_ssize_t o_ = 0; o_ < outer_; o_++) {                                              \
            body;                                                                                 \
            (dst) += (shape)[(ndim) - 1];                                                         \
            for (int a_ = (ndim) - 2; a_ >= 0; a_--) {                                            \
                s += (st)[a_];                                                                    \
                if (++idx_[a_] < (shape)[a_])                                                     \
                    break;                                                                        \
                s -= (shape)[a_] * (st)[a_];                                                      \
                idx_[a_] = 0;                                                                     \
            }                                                                                     \
        }                                                                                         \
    } while (0)

/* The two buffers of a run-wise conversion, checked: the same 1 to 8 axes, src of `itemsize`-byte
 * items with a contiguous innermost axis, dst of 4-byte items, not overlapping; NULL or the error. */
static const char *run_buffers_error(const Py_buffer *src, const Py_buffer *dst, Py_ssize_t itemsize) {
    if (src->ndim < 1 || src->ndim > MAX_DIMS || dst->ndim != src->ndim || src->itemsize != itemsize ||
        dst->itemsize != 4)
        return itemsize == 1 ? "src and dst must have the same 1 to 8 axes, of 1- and 4-byte items"
                             : "src and dst must have the same 1 to 8 axes, of 2- and 4-byte items";
    if (src->strides[src->ndim - 1] != itemsize && src->shape[src->ndim - 1] > 1)
        return "src's innermost axis must be contiguous";
    for (int a = 0; a < src->ndim; a++)
        if (src->shape[a] != dst->shape[a])
            return "src and dst must have the same shape";
    if (overlaps(src, dst))
        return "src and dst must not overlap";
    return NULL;
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define HAVE_F16C_PATH 1

/* n float32 -> fp16, round to nearest even (the F16C instruction: IEEE conversion, subnormal
 * results included); 0 as soon as a NaN or a value of magnitude >= 65520 (one that rounds to
 * inf) is met - numpy's path gives its NaN bits and its overflow warning - else 1. */
__attribute__((target("f16c,avx"))) static int narrow_rows(const float *s, uint16_t *d, Py_ssize_t n) {
    const __m256 big = _mm256_set1_ps(65520.0f), sign = _mm256_set1_ps(-0.0f);
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(s + i);
        /* NaN (unordered) or a magnitude that rounds to inf: numpy's path (its NaN bits, its
         * overflow warning) */
        if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, v), big, _CMP_NLT_UQ)))
            return 0;
        _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) {
        if (!(s[i] > -65520.0f && s[i] < 65520.0f))
            return 0;
        d[i] = (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(s[i]), _MM_FROUND_TO_NEAREST_INT), 0);
    }
    return 1;
}
#endif

/* widen_i8_runs, widen_f16_runs (a mad operand's C0 lines to float32): kept in their own file */
#include "_lines_widen.c"

PyDoc_STRVAR(narrow_f16_doc,
"narrow_f16(src, dst) -> bool\n--\n\n"
"dst[i] = fp16 bits of float32 src[i], rounded to nearest even: src a C-contiguous buffer of\n"
"4-byte items, dst a writable C-contiguous buffer of as many 2-byte items, not overlapping.\n"
"False when it did not convert everything - the CPU has no F16C, or src holds a NaN or a value\n"
"that rounds to inf (dst then partly written) - and the caller converts. The GIL is released while the elements move.");

static PyObject *narrow_f16(PyObject *self, PyObject *args) {
    PyObject *so, *dobj;
    Py_buffer src, dst;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO", &so, &dobj))
        return NULL;
    if (PyObject_GetBuffer(so, &src, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(dobj, &dst, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    const Py_ssize_t n = src.len / 4;
    int done = 0;
    if (src.len % 4 || dst.len != 2 * n)
        return finish(&src, &dst, "narrow_f16: src of 4-byte items, dst of as many 2-byte items");
    if ((const char *)dst.buf < (const char *)src.buf + src.len && (const char *)src.buf < (const char *)dst.buf + dst.len)
        return finish(&src, &dst, "narrow_f16: src and dst must not overlap");
#ifdef HAVE_F16C_PATH
    if (__builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx")) {
        Py_BEGIN_ALLOW_THREADS
        done = narrow_rows(src.buf, dst.buf, n);
        Py_END_ALLOW_THREADS
    }
#endif
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return PyBool_FromLong(done);
}


/* float32 bits and back (no aliasing through pointers) */
static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* v rounded to the nearest fp16 value (ties to even), as a float32; a NaN stays as it is. Overflow
 * gives inf (from 65520 on), a magnitude below 2^-14 rounds on fp16's subnormal grid of 2^-24.
 * Written without branches (both candidates, then selects) so the level's loop vectorises. */
static inline float round_f16(float v) {
    const uint32_t x = f2u(v), sign = x & 0x80000000u, a = x ^ sign;
    const uint32_t normal = (a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu; /* 13 bits dropped, ties to even */
    const uint32_t sub = f2u((u2f(a) + 0.5f) - 0.5f); /* 0.5 + |v| rounds to a multiple of 2^-24 */
    uint32_t r = a < 0x38800000u ? sub : normal;
    r = a >= 0x477ff000u ? 0x7f800000u : r; /* |v| >= 65520 (inf too): inf */
    return a > 0x7f800000u ? v : u2f(r | sign);
}

/* v rounded to the nearest bf16 value (ties to even), as a float32; a NaN stays as it is. */
static inline float round_bf16(float v) {
    const uint32_t x = f2u(v);
    const uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) & 0xffff0000u;
    return (x & 0x7fffffffu) > 0x7f800000u ? v : u2f(r);
}

#if defined(__GNUC__)
#define ALWAYS_INLINE __attribute__((always_inline))
#else
#define ALWAYS_INLINE
#endif

/* d[i] = a[i] + b[i] for i < n, then rounded (0: none, 1: fp16, 2: bf16). always_inline: it is
 * compiled inside each target's copy of tree_rows below (a default-target body may be inlined into
 * an AVX2 one, whose vector width it then takes). */
static inline ALWAYS_INLINE void add_level(float *restrict d, const float *restrict a,
                                                            const float *restrict b, Py_ssize_t n, int rounding) {
    for (Py_ssize_t i = 0; i < n; i++)
        d[i] = a[i] + b[i];
    if (rounding == 1)
        for (Py_ssize_t i = 0; i < n; i++)
            d[i] = round_f16(d[i]);
    else if (rounding == 2)
        for (Py_ssize_t i = 0; i < n; i++)
            d[i] = round_bf16(d[i]);
}

/* The tree of one row of n >= 2 contiguous floats; bufs: two scratch rows of (n + 1) / 2. */
static inline ALWAYS_INLINE float tree_row(const float *row, Py_ssize_t n, float *b0, float *b1,
                                                            int rounding) {
    const float *s = row;
    float *d = b0;
    while (n > 1) {
        const Py_ssize_t h = n / 2, odd = n % 2;
        add_level(d, s, s + h, h, rounding);
        if (odd)
            d[h] = s[2 * h];
        s = d;
        d = d == b0 ? b1 : b0;
        n = h + odd;
    }
    return s[0];
}

/* Every row's tree into out; returns how many rows summed to NaN. The body is compiled once per
 * target: the SSE2 baseline, and AVX2 (8 lanes a vector add instead of 4: the adds, their pairs
 * and their rounding are the same IEEE operations either way - no FMA, no reassociation - so the
 * same bits; tests/runtime/test_tree_sum.py's hypothesis tests compare it with numpy's levels
 * and the two loops with each other). */
#define TREE_ROWS_BODY                                                                          \
    {                                                                                           \
        Py_ssize_t nan_rows = 0;                                                                \
        for (Py_ssize_t r = 0; r < rows; r++) {                                                 \
            const float *row = (const float *)(src + r * row_stride);                           \
            const float v = n == 1 ? row[0] : tree_row(row, n, bufs, bufs + half, rounding);    \
            out[r] = v;                                                                         \
            nan_rows += v != v;                                                                 \
        }                                                                                       \
        return nan_rows;                                                                        \
    }

static Py_ssize_t tree_rows(const char *src, Py_ssize_t row_stride, Py_ssize_t rows, Py_ssize_t n, float *out,
                            float *bufs, Py_ssize_t half, int rounding) TREE_ROWS_BODY

#ifdef HAVE_F16C_PATH
#define HAVE_AVX2_TREE 1
__attribute__((target("avx2"))) static Py_ssize_t tree_rows_avx2(const char *src, Py_ssize_t row_stride,
                                                                 Py_ssize_t rows, Py_ssize_t n, float *out,
                                                                 float *bufs, Py_ssize_t half,
                                                                 int rounding) TREE_ROWS_BODY
#endif

PyDoc_STRVAR(tree_sum_doc,
"tree_sum(src, dst, rounding, baseline=False) -> int\n--\n\n"
"dst[r] = the binary-tree sum of row r of src (level by level, element i + element i + half,\n"
"an odd level's last element carried on), each level rounded to fp16 (rounding 1) or bf16 (2),\n"
"or not (0). src: a 2-D buffer of float32 whose rows are contiguous (any row stride); dst: a\n"
"writable C-contiguous buffer of one float32 per row. Returns how many rows summed to NaN\n"
"(their payload is not promised: the caller recomputes them). The GIL is released meanwhile.\n"
"baseline: take the SSE2 loop even where the CPU has AVX2 (for tests: the same bits either way).");

static PyObject *tree_sum(PyObject *self, PyObject *args) {
    PyObject *so, *dobj;
    int rounding, baseline = 0;
    Py_buffer src, dst;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOi|p", &so, &dobj, &rounding, &baseline))
        return NULL;
    if (PyObject_GetBuffer(so, &src, PyBUF_STRIDES | PyBUF_FORMAT) < 0)
        return NULL;
    if (PyObject_GetBuffer(dobj, &dst, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    const char *error = NULL;
    Py_ssize_t nan_rows = 0;
    if (src.ndim != 2 || src.itemsize != 4 || src.format == NULL || strcmp(src.format, "f") != 0)
        error = "tree_sum: src must be a 2-D float32 buffer";
    else if (src.shape[1] < 1 || (src.strides[1] != 4 && src.shape[1] > 1))
        error = "tree_sum: src's rows must be non-empty and contiguous";
    else if (rounding < 0 || rounding > 2)
        error = "tree_sum: rounding is 0 (none), 1 (fp16) or 2 (bf16)";
    else if (dst.len != 4 * src.shape[0])
        error = "tree_sum: dst must hold one float32 per row of src";
    else if (overlaps(&src, &dst))
        error = "tree_sum: src and dst must not overlap";
    if (error == NULL && src.shape[0]) {
        const Py_ssize_t rows = src.shape[0], n = src.shape[1], half = (n + 1) / 2;
        float *bufs = PyMem_RawMalloc(sizeof(float) * 2 * (size_t)half);
        if (bufs == NULL) {
            PyBuffer_Release(&src);
            PyBuffer_Release(&dst);
            return PyErr_NoMemory();
        }
        float *out = dst.buf;
        Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_AVX2_TREE
        if (!baseline && __builtin_cpu_supports("avx2"))
            nan_rows = tree_rows_avx2(src.buf, src.strides[0], rows, n, out, bufs, half, rounding);
        else
#endif
            nan_rows = tree_rows(src.buf, src.strides[0], rows, n, out, bufs, half, rounding);
        Py_END_ALLOW_THREADS
        PyMem_RawFree(bufs);
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    if (error != NULL) {
        PyErr_SetString(PyExc_ValueError, error);
        return NULL;
    }
    return PyLong_FromSsize_t(nan_rows);
}

static PyMethodDef methods[] = {
    {"swap", swap, METH_VARARGS, swap_doc},
    {"widen_bf16", widen_bf16, METH_VARARGS, widen_bf16_doc},
    {"lookup16", lookup16, METH_VARARGS, lookup16_doc},
    {"narrow_f16", narrow_f16, METH_VARARGS, narrow_f16_doc},
    {"widen_i8_runs", widen_i8_runs, METH_VARARGS, widen_i8_runs_doc},
    {"widen_f16_runs", widen_f16_runs, METH_VARARGS, widen_f16_runs_doc},
    {"widen_bf16_runs", widen_bf16_runs, METH_VARARGS, widen_bf16_runs_doc},
    {"tree_sum", tree_sum, METH_VARARGS, tree_sum_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "runtime._lines",
    "The NZ permutation of 32-byte lines, the transposing bf16 widening and the fp16 widening table, compiled (see runtime/nz.py, runtime/widen.py).", -1, methods,
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
