/* Read the calling thread's floating-point control register: MXCSR on x86-64, FPCR on aarch64.
 *
 * mojolike.core.fpstate calls deviation() on every identical-mode entry point, so it is a
 * METH_NOARGS function of a plain extension module (about 35 ns a call; a cffi call
 * costs three times that). It only reads a register: the flags it is built with do
 * not matter to any result.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
static uint64_t read_register(void) { return _mm_getcsr(); }
/* FTZ (bit 15), rounding control (bits 13-14), DAZ (bit 6) */
static const uint64_t WATCHED = 0x8000u | 0x6000u | 0x0040u;
static const char REGISTER[] = "MXCSR";
#elif defined(__aarch64__)
static uint64_t read_register(void) {
    uint64_t v;
    __asm__ volatile("mrs %0, fpcr" : "=r"(v));
    return v;
}
/* FZ (bit 24), RMode (bits 22-23), and FEAT_AFP's FIZ (bit 0) and AH (bit 1) */
static const uint64_t WATCHED = (1u << 24) | (3u << 22) | 3u;
static const char REGISTER[] = "FPCR";
#else
#error "mojolike._fpcsr: only x86-64 and aarch64 (elsewhere mojolike.core.fpstate probes by arithmetic)"
#endif

static PyObject *deviation(PyObject *self, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(read_register() & WATCHED);
}

static PyObject *raw(PyObject *self, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(read_register());
}

static PyMethodDef methods[] = {
    {"deviation", deviation, METH_NOARGS, "The watched bits of the control register (0 when the state is right)."},
    {"raw", raw, METH_NOARGS, "The whole control register."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fpcsr", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fpcsr(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "REGISTER", REGISTER) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
