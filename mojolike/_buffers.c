/* The data addresses of many buffers in one call, for mojolike.core.pieces.
 *
 * An optimizer step checks that no parameter or gradient moved under it (a resize with
 * refcheck=False): hundreds of addresses a step. numpy's __array_interface__ builds a dict
 * per array (about 1.6 us); a buffer export reads the pointer (about 0.1 us). It only reads:
 * the flags it is built with do not matter to any result.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *addresses(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "addresses() takes a list or tuple of buffers");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyTuple_New(n);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value;
        if (items[i] == Py_None) {
            value = Py_NewRef(Py_None);
        } else {
            Py_buffer view;
            if (PyObject_GetBuffer(items[i], &view, PyBUF_STRIDED_RO) < 0) {
                Py_DECREF(out);
                Py_DECREF(seq);
                return NULL;
            }
            value = PyLong_FromVoidPtr(view.buf);
            PyBuffer_Release(&view);
            if (value == NULL) {
                Py_DECREF(out);
                Py_DECREF(seq);
                return NULL;
            }
        }
        PyTuple_SET_ITEM(out, i, value);
    }
    Py_DECREF(seq);
    return out;
}

static PyMethodDef methods[] = {
    {"addresses", addresses, METH_O,
     "The data address of each buffer of a list or tuple, as a tuple of ints (None stays None)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_buffers", NULL, -1, methods};

PyMODINIT_FUNC PyInit__buffers(void) { return PyModule_Create(&module); }
