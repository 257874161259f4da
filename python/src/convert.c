/* Elements to Python objects. Fixed-width tensors become numpy arrays of the same dtype and
 * shape; bytes scalars become bytes and bytes tensors object arrays of bytes; several components
 * a tuple. A tensor of at least ZERO_COPY_MIN bytes in an element the caller owns is not copied:
 * its array points into the element, which a capsule frees once the last array is gone. */
#include "pysluice.h"

#include <stdbool.h>
#include <string.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#define ZERO_COPY_MIN 4096

int pys_convert_init(void)
{
    import_array1(-1);
    return 0;
}

static int npy_type(enum sluice_dtype d)
{
    switch (d) {
    case SLUICE_BOOL:
        return NPY_BOOL;
    case SLUICE_INT8:
        return NPY_INT8;
    case SLUICE_INT16:
        return NPY_INT16;
    case SLUICE_INT32:
        return NPY_INT32;
    case SLUICE_INT64:
        return NPY_INT64;
    case SLUICE_UINT8:
        return NPY_UINT8;
    case SLUICE_UINT16:
        return NPY_UINT16;
    case SLUICE_UINT32:
        return NPY_UINT32;
    case SLUICE_UINT64:
        return NPY_UINT64;
    case SLUICE_FLOAT32:
        return NPY_FLOAT32;
    case SLUICE_FLOAT64:
        return NPY_FLOAT64;
    case SLUICE_BYTES:
        return NPY_OBJECT;
    }
    return -1;
}

static void free_element(PyObject *capsule)
{
    sluice_element_free(PyCapsule_GetPointer(capsule, "sluice.element"));
}

static PyObject *bytes_component(const struct sluice_element *e, size_t i)
{
    int rank = sluice_element_rank(e, i);
    uint64_t n = sluice_element_num_values(e, i);
    const void *data;
    size_t len;
    if (rank == 0) {
        int rc = sluice_element_bytes_at(e, i, 0, &data, &len);
        if (rc)
            return pys_raise(rc, NULL);
        return PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
    }
    npy_intp dims[SLUICE_MAX_RANK];
    const int64_t *shape = sluice_element_shape(e, i);
    for (int d = 0; d < rank; d++)
        dims[d] = (npy_intp)shape[d];
    PyObject *arr = PyArray_SimpleNew(rank, dims, NPY_OBJECT);
    if (!arr)
        return NULL;
    PyObject **items = PyArray_DATA((PyArrayObject *)arr);
    for (uint64_t k = 0; k < n; k++) {
        int rc = sluice_element_bytes_at(e, i, k, &data, &len);
        PyObject *b = rc ? pys_raise(rc, NULL) : PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
        if (!b) {
            Py_DECREF(arr);
            return NULL;
        }
        Py_XSETREF(items[k], b);
    }
    return arr;
}

/* One component; *capsule is created on first zero-copy use (and then owns the element). */
static PyObject *component(struct sluice_element *e, size_t i, bool may_share, PyObject **capsule)
{
    enum sluice_dtype dt = sluice_element_dtype(e, i);
    if (dt == SLUICE_BYTES)
        return bytes_component(e, i);
    int type = npy_type(dt);
    if (type < 0)
        return pys_raise(SLUICE_ERR_TYPE, "element of an unknown dtype");
    int rank = sluice_element_rank(e, i);
    npy_intp dims[SLUICE_MAX_RANK];
    const int64_t *shape = sluice_element_shape(e, i);
    for (int d = 0; d < rank; d++)
        dims[d] = (npy_intp)shape[d];
    size_t nbytes = 0;
    void *data = (void *)sluice_element_data(e, i, &nbytes);
    if (may_share && nbytes >= ZERO_COPY_MIN) {
        if (!*capsule) {
            *capsule = PyCapsule_New(e, "sluice.element", free_element);
            if (!*capsule)
                return NULL;
        }
        PyObject *arr =
            PyArray_New(&PyArray_Type, rank, dims, type, NULL, data, 0, NPY_ARRAY_CARRAY, NULL);
        if (!arr)
            return NULL;
        Py_INCREF(*capsule);
        if (PyArray_SetBaseObject((PyArrayObject *)arr, *capsule) < 0) {
            Py_DECREF(arr);
            return NULL;
        }
        return arr;
    }
    PyObject *arr = PyArray_SimpleNew(rank, dims, type);
    if (!arr)
        return NULL;
    if (nbytes)
        memcpy(PyArray_DATA((PyArrayObject *)arr), data, nbytes);
    return arr;
}

PyObject *pys_element_to_py(struct sluice_element *elem, struct sluice_element **owned)
{
    size_t n = sluice_element_num_components(elem);
    PyObject *capsule = NULL;
    bool may_share = owned && *owned == elem;
    PyObject *out = NULL;
    if (n == 1) {
        out = component(elem, 0, may_share, &capsule);
    } else {
        out = PyTuple_New((Py_ssize_t)n);
        for (size_t i = 0; out && i < n; i++) {
            PyObject *c = component(elem, i, may_share, &capsule);
            if (!c) {
                Py_CLEAR(out);
                break;
            }
            PyTuple_SET_ITEM(out, (Py_ssize_t)i, c);
        }
    }
    if (capsule) {
        /* The capsule owns the element now, whatever happened to the arrays. */
        *owned = NULL;
        Py_DECREF(capsule);
    }
    return out;
}
