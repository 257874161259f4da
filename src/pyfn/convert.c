/* Elements to Python objects and back (convert.h). A tensor of at least ZERO_COPY_MIN bytes in an
 * element the caller owns is not copied: its array points into the element, which a capsule
 * frees once the last array is gone. The way back copies each value once, into the element's
 * reused buffers. */
#include "convert.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#define ZERO_COPY_MIN 4096
/* The most components an element has (PIPE_MAX_COMPONENTS). */
#define MAX_COMPONENTS 64

int pyconv_init(void)
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

/* Raises for a libsluice code where an element accessor failed (which a valid element never
 * makes it do). Returns NULL. */
static PyObject *raise_code(int rc)
{
    PyErr_SetString(PyExc_RuntimeError, sluice_strerror(rc));
    return NULL;
}

/* ---- Element to Python -------------------------------------------------------------------- */

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
            return raise_code(rc);
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
        PyObject *b = rc ? raise_code(rc) : PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
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
        return raise_code(SLUICE_ERR_TYPE);
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

PyObject *pyconv_from_element(struct sluice_element *elem, struct sluice_element **owned)
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

PyObject *pyconv_shm_place(PyObject *obj)
{
    if (!PyArray_Check(obj) || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)obj))
        Py_RETURN_NONE;
    PyArrayObject *arr = (PyArrayObject *)obj;
    const uint8_t *at = PyArray_DATA(arr);
    size_t nbytes = (size_t)PyArray_NBYTES(arr);
    /* The capsule of the element the values are in: the array's base, or its base's. */
    PyObject *base = PyArray_BASE(arr);
    while (base && PyArray_Check(base))
        base = PyArray_BASE((PyArrayObject *)base);
    if (!base || !PyCapsule_IsValid(base, "sluice.element"))
        Py_RETURN_NONE;
    const struct sluice_element *e = PyCapsule_GetPointer(base, "sluice.element");
    for (size_t i = 0; i < sluice_element_num_components(e); i++) {
        size_t len = 0;
        const uint8_t *data = sluice_element_data(e, i, &len);
        if (at < data || at > data + len || nbytes > (size_t)(data + len - at))
            continue;
        struct sluice_shm_place p;
        if (sluice_element_shm_place(e, i, &p) != 0)
            Py_RETURN_NONE;
        return Py_BuildValue("(iKKK)", p.fd, (unsigned long long)(p.offset + (uint64_t)(at - data)),
                             (unsigned long long)p.region_len, (unsigned long long)p.region_id);
    }
    Py_RETURN_NONE;
}

/* ---- Python to element -------------------------------------------------------------------- */

/* Where a failing value stands, for messages: the whole result, or item `item` of a tuple. */
struct place {
    bool in_tuple;
    size_t item;
};

#define EXPECTED_TOP "expected a numpy array, a number, bytes or a tuple of them"
#define EXPECTED_ITEM "expected a numpy array, a number or bytes"

/* "returned WHAT, WHY" or "returned a tuple whose item 1 is WHAT, WHY". */
static int refuse(const struct place *at, char *err, size_t errlen, const char *what,
                  const char *why)
{
    if (at->in_tuple)
        snprintf(err, errlen, "returned a tuple whose item %zu is %s, %s", at->item, what, why);
    else
        snprintf(err, errlen, "returned %s, %s", what, why);
    return SLUICE_ERR_TYPE;
}

/* The dtype of a numpy array of fixed-width numbers or bools, or -1. */
static int sluice_dtype_of(PyArrayObject *arr)
{
    char kind = PyArray_DESCR(arr)->kind;
    npy_intp size = PyArray_ITEMSIZE(arr);
    static const enum sluice_dtype ints[] = {SLUICE_INT8, SLUICE_INT16, SLUICE_INT32, SLUICE_INT64};
    static const enum sluice_dtype uints[] = {SLUICE_UINT8, SLUICE_UINT16, SLUICE_UINT32,
                                              SLUICE_UINT64};
    int log2 = size == 1 ? 0 : size == 2 ? 1 : size == 4 ? 2 : size == 8 ? 3 : -1;
    switch (kind) {
    case 'b':
        return size == 1 ? (int)SLUICE_BOOL : -1;
    case 'i':
        return log2 < 0 ? -1 : (int)ints[log2];
    case 'u':
        return log2 < 0 ? -1 : (int)uints[log2];
    case 'f':
        return size == 4 ? (int)SLUICE_FLOAT32 : size == 8 ? (int)SLUICE_FLOAT64 : -1;
    default:
        return -1;
    }
}

/* "a numpy array of dtype float16" (or "a numpy scalar of ..."), into buf. */
static const char *describe_array(PyArrayObject *arr, bool scalar, char *buf, size_t len)
{
    PyObject *name = PyObject_Str((PyObject *)PyArray_DESCR(arr));
    const char *s = name ? PyUnicode_AsUTF8(name) : NULL;
    snprintf(buf, len, "a numpy %s of dtype %s", scalar ? "scalar" : "array", s ? s : "?");
    Py_XDECREF(name);
    PyErr_Clear();
    return buf;
}

static int shape_of(PyArrayObject *arr, int64_t shape[SLUICE_MAX_RANK])
{
    int rank = PyArray_NDIM(arr);
    for (int d = 0; d < rank; d++)
        shape[d] = (int64_t)PyArray_DIM(arr, d);
    return rank;
}

/* Reports a libsluice failure to store a value. */
static int store_failed(int rc, char *err, size_t errlen)
{
    snprintf(err, errlen, "storing the result: %s", sluice_strerror(rc));
    return rc;
}

/* A bytes tensor from an object array of bytes or a fixed-width bytes ("S") array. */
static int bytes_array(PyArrayObject *arr, struct sluice_element *e, size_t i,
                       const struct place *at, bool scalar, char *err, size_t errlen)
{
    bool objects = PyArray_TYPE(arr) == NPY_OBJECT;
    PyArrayObject *c = (PyArrayObject *)PyArray_FromArray(arr, NULL, NPY_ARRAY_C_CONTIGUOUS);
    if (!c)
        return SLUICE_ERR_FN;
    npy_intp n = PyArray_SIZE(c);
    npy_intp itemsize = PyArray_ITEMSIZE(c);
    const void **values = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*values));
    size_t *lens = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*lens));
    int rc = 0;
    if (!values || !lens) {
        PyErr_NoMemory();
        rc = SLUICE_ERR_NOMEM;
        goto out;
    }
    const char *data = PyArray_DATA(c);
    for (npy_intp k = 0; k < n; k++) {
        if (objects) {
            PyObject *item = ((PyObject *const *)(const void *)data)[k];
            if (!item || !PyBytes_Check(item)) {
                char what[160];
                snprintf(what, sizeof what, "a numpy object array holding %s",
                         item ? Py_TYPE(item)->tp_name : "NULL");
                rc = refuse(at, err, errlen, what, "expected bytes");
                goto out;
            }
            values[k] = PyBytes_AS_STRING(item);
            lens[k] = (size_t)PyBytes_GET_SIZE(item);
        } else {
            /* numpy's "S" values end at their first trailing NUL, as bytes(a[k]) does. */
            const char *p = data + k * itemsize;
            size_t len = (size_t)itemsize;
            while (len > 0 && p[len - 1] == '\0')
                len--;
            values[k] = p;
            lens[k] = len;
        }
    }
    int64_t shape[SLUICE_MAX_RANK];
    int rank = scalar ? 0 : shape_of(c, shape);
    rc = sluice_element_set_bytes_tensor(e, i, rank, shape, values, lens);
    if (rc)
        rc = store_failed(rc, err, errlen);
out:
    PyMem_Free(values);
    PyMem_Free(lens);
    Py_DECREF(c);
    return rc;
}

static int from_array(PyArrayObject *arr, struct sluice_element *e, size_t i,
                      const struct place *at, bool scalar, char *err, size_t errlen)
{
    char what[160];
    if (PyArray_NDIM(arr) > SLUICE_MAX_RANK) {
        snprintf(what, sizeof what, "a numpy array of rank %d", PyArray_NDIM(arr));
        return refuse(at, err, errlen, what, "which is more than sluice's 8 dimensions");
    }
    if (PyArray_TYPE(arr) == NPY_OBJECT || PyArray_TYPE(arr) == NPY_STRING)
        return bytes_array(arr, e, i, at, scalar, err, errlen);
    int dtype = sluice_dtype_of(arr);
    if (dtype < 0)
        return refuse(at, err, errlen, describe_array(arr, scalar, what, sizeof what),
                      "which sluice cannot hold");
    /* Contiguous, aligned, in this machine's byte order: a copy only where arr is not. */
    PyArray_Descr *native = PyArray_DescrFromType(npy_type((enum sluice_dtype)dtype));
    if (!native)
        return SLUICE_ERR_FN;
    PyArrayObject *c = (PyArrayObject *)PyArray_FromArray(
        arr, native, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST);
    if (!c)
        return SLUICE_ERR_FN;
    int64_t shape[SLUICE_MAX_RANK];
    int rank = shape_of(c, shape);
    int rc = sluice_element_set_tensor(e, i, (enum sluice_dtype)dtype, rank, shape, PyArray_DATA(c),
                                       (size_t)PyArray_NBYTES(c));
    Py_DECREF(c);
    return rc ? store_failed(rc, err, errlen) : 0;
}

/* One component from obj; at says where obj stands for messages. */
static int from_object(PyObject *obj, struct sluice_element *e, size_t i, const struct place *at,
                       char *err, size_t errlen)
{
    int rc;
    if (PyBool_Check(obj)) {
        uint8_t v = obj == Py_True;
        rc = sluice_element_set_tensor(e, i, SLUICE_BOOL, 0, NULL, &v, 1);
    } else if (PyLong_Check(obj)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
        if (overflow)
            return refuse(at, err, errlen, "an int outside int64", EXPECTED_ITEM);
        if (v == -1 && PyErr_Occurred())
            return SLUICE_ERR_FN;
        rc = sluice_element_set_int64(e, i, (int64_t)v);
    } else if (PyFloat_Check(obj)) {
        rc = sluice_element_set_float64(e, i, PyFloat_AS_DOUBLE(obj));
    } else if (PyBytes_Check(obj)) {
        rc = sluice_element_set_bytes(e, i, PyBytes_AS_STRING(obj), (size_t)PyBytes_GET_SIZE(obj));
    } else if (PyArray_Check(obj)) {
        return from_array((PyArrayObject *)obj, e, i, at, false, err, errlen);
    } else if (PyArray_IsScalar(obj, Generic)) {
        PyObject *arr = PyArray_FromScalar(obj, NULL);
        if (!arr)
            return SLUICE_ERR_FN;
        rc = from_array((PyArrayObject *)arr, e, i, at, true, err, errlen);
        Py_DECREF(arr);
        return rc;
    } else {
        return refuse(at, err, errlen, Py_TYPE(obj)->tp_name,
                      at->in_tuple ? EXPECTED_ITEM : EXPECTED_TOP);
    }
    return rc ? store_failed(rc, err, errlen) : 0;
}

int pyconv_to_element(PyObject *obj, struct sluice_element *elem, char *err, size_t errlen)
{
    if (errlen)
        err[0] = '\0';
    struct place at = {false, 0};
    size_t n = 1;
    int rc;
    if (PyTuple_Check(obj)) {
        Py_ssize_t size = PyTuple_GET_SIZE(obj);
        if (size == 0) {
            snprintf(err, errlen, "returned an empty tuple, " EXPECTED_TOP);
            return SLUICE_ERR_TYPE;
        }
        if (size > MAX_COMPONENTS) {
            snprintf(err, errlen, "returned a tuple of %zd items, at most %d", size,
                     MAX_COMPONENTS);
            return SLUICE_ERR_TYPE;
        }
        n = (size_t)size;
        at.in_tuple = true;
        for (size_t k = 0; k < n; k++) {
            at.item = k;
            rc = from_object(PyTuple_GET_ITEM(obj, (Py_ssize_t)k), elem, k, &at, err, errlen);
            if (rc)
                return rc;
        }
    } else {
        rc = from_object(obj, elem, 0, &at, err, errlen);
        if (rc)
            return rc;
    }
    rc = sluice_element_set_num_components(elem, n);
    return rc ? store_failed(rc, err, errlen) : 0;
}
