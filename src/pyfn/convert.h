/* Elements to Python objects and back: the one conversion both sides of sluice use. The Python
 * package (python/) hands elements to the trainer with it, and py functions (runtime.h) get
 * their argument and give their result through it, in the trainer or in a worker.
 *
 * Element to Python: a fixed-width tensor becomes a numpy array of the same dtype and shape (0-d
 * for a scalar), a bytes scalar `bytes`, a bytes tensor of rank >= 1 an object array of `bytes`;
 * an element of several components a tuple of those.
 *
 * Python to element: the same forms, and the scalars a function naturally returns: a numpy
 * array of bool, int8..int64, uint8..uint64, float32 or float64 (any strides and byte order), an
 * object array of bytes or a fixed-width bytes array ("S") becomes a tensor of that shape; a
 * numpy scalar a scalar of its dtype; a Python bool a bool, an int an int64, a float a float64,
 * `bytes` a bytes scalar; a tuple of those an element of several components.
 *
 * Everything here needs the GIL and only the public element API of <sluice/sluice.h>, so the
 * extension (which links libsluice.so) and the worker (which links the engine) share it. */
#ifndef SLUICE_PYFN_CONVERT_H
#define SLUICE_PYFN_CONVERT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "sluice/sluice.h"

#include <stddef.h>

/* Prepares numpy's C API (imports numpy). Returns 0, or -1 with a Python exception set. Call
 * once, with the GIL, before anything below. */
int pyconv_init(void);

/* The Python form of elem. When owned is non-NULL and *owned == elem, the element belongs to the
 * caller and large fixed-width tensors are handed over without a copy: the arrays keep the
 * element alive and *owned is set to NULL (the caller needs a new element). Otherwise every value
 * is copied into objects of their own, which the receiver may modify, and elem is not touched.
 * Returns a new reference, or NULL with a Python exception set. */
PyObject *pyconv_from_element(struct sluice_element *elem, struct sluice_element **owned);

/* Where the values of arr (a C-contiguous numpy array made by pyconv_from_element without a
 * copy, or a view of one) lie in a shared-memory region of this process
 * (sluice_element_shm_place): a tuple (fd, offset, region_len, region_id), with offset that of
 * arr's first byte; None when they lie elsewhere. Returns a new reference, or NULL with a Python
 * exception set. */
PyObject *pyconv_shm_place(PyObject *arr);

/* Replaces the contents of elem by obj converted (see above; elem's buffers are reused).
 * Returns 0; or a negative code with a one-line reason in err naming what obj was
 * ("returned str, expected ..."); or a negative code with a Python exception set and err empty
 * when Python itself failed (out of memory). elem may be partly changed after a failure. */
int pyconv_to_element(PyObject *obj, struct sluice_element *elem, char *err, size_t errlen);

#endif
