/* Feeds arbitrary bytes to parse_example's wire reader as a tf.train.Example and checks it against
 * protobuf-c's unpacker generated from proto/example.proto: whenever protobuf-c accepts the
 * record, the reader must give, for every spec, what protobuf-c's message holds (the value of the
 * last entry with the key, or the error its absence, kind or count calls for). When protobuf-c
 * refuses the record the reader may still accept it (it does not look inside features it is not
 * asked for), but must not crash. The first byte picks the dtypes asked of the features "a", "b",
 * "c" and "ab" (two bits each); the rest is the record. */
#include "fuzz.h"

#include "example.pb-c.h"
#include "common/error.h"
#include "pipeline/element.h"
#include "pipeline/example.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSPECS 4

static void fail(const char *what, size_t i, const char *err)
{
    fprintf(stderr, "fuzz_example: spec %zu: %s (reader: %s)\n", i, what, err);
    abort();
}

/* The feature protobuf-c's message holds for the key, or NULL (the last entry wins). */
static const Tensorflow__Feature *lookup(const Tensorflow__Example *ex,
                                         const struct pipe_feature_spec *s)
{
    const Tensorflow__Feature *f = NULL;
    static const Tensorflow__Feature empty = TENSORFLOW__FEATURE__INIT;
    for (size_t j = 0; ex->features && j < ex->features->n_feature; j++) {
        const Tensorflow__Features__FeatureEntry *e = ex->features->feature[j];
        if (e->key.len == s->name_len &&
            (s->name_len == 0 || memcmp(e->key.data, s->name, s->name_len) == 0))
            f = e->value ? e->value : &empty;
    }
    return f;
}

static void check_spec(const Tensorflow__Example *ex, const struct pipe_feature_spec *s, size_t i,
                       int rc, const struct pipe_tensor *t, const char *err)
{
    const Tensorflow__Feature *f = lookup(ex, s);
    if (!f) {
        if (rc != SLUICE_ERR_NOT_FOUND)
            fail("missing feature not reported", i, err);
        return;
    }
    size_t n = 0;
    enum sluice_dtype dtype = s->dtype;
    switch (f->kind_case) {
    case TENSORFLOW__FEATURE__KIND_BYTES_LIST:
        dtype = SLUICE_BYTES;
        n = f->bytes_list ? f->bytes_list->n_value : 0;
        break;
    case TENSORFLOW__FEATURE__KIND_FLOAT_LIST:
        dtype = SLUICE_FLOAT32;
        n = f->float_list ? f->float_list->n_value : 0;
        break;
    case TENSORFLOW__FEATURE__KIND_INT64_LIST:
        dtype = SLUICE_INT64;
        n = f->int64_list ? f->int64_list->n_value : 0;
        break;
    default:
        break;
    }
    if (dtype != s->dtype) {
        if (rc != SLUICE_ERR_TYPE)
            fail("wrong kind not reported", i, err);
        return;
    }
    /* Every spec here is a variable-length rank-1 list. */
    if (rc != 0)
        fail("a feature protobuf-c reads was refused", i, err);
    if (t->dtype != dtype || t->rank != 1 || t->shape[0] < (int64_t)n)
        fail("wrong dtype or shape", i, err);
    /* protobuf-c keeps only the last occurrence of a oneof member that occurs several times in a
     * row, where protobuf merges them (and the reader with it); its values are then the tail of
     * the reader's. */
    size_t skip = (size_t)t->shape[0] - n;
    if (dtype == SLUICE_INT64 && n &&
        memcmp((const int64_t *)(const void *)t->data + skip, f->int64_list->value,
               n * sizeof(int64_t)) != 0)
        fail("int64 values differ", i, err);
    if (dtype == SLUICE_FLOAT32 && n &&
        memcmp((const float *)(const void *)t->data + skip, f->float_list->value, n * 4) != 0)
        fail("float values differ", i, err);
    if (dtype == SLUICE_BYTES) {
        size_t off = t->offs[skip];
        for (size_t k = 0; k < n; k++) {
            const ProtobufCBinaryData *b = &f->bytes_list->value[k];
            if (t->offs[skip + k] != off || t->offs[skip + k + 1] != off + b->len ||
                (b->len && memcmp(t->data + off, b->data, b->len) != 0))
                fail("bytes values differ", i, err);
            off += b->len;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    static const char *const names[NSPECS] = {"a", "b", "c", "ab"};
    static const char *const dtypes[4] = {"bytes", "int64", "float32", "int64"};
    struct pipe_feature_spec specs[NSPECS];
    char text[NSPECS][32], err[SLUICE_ERRMSG_SIZE] = "";
    for (size_t i = 0; i < NSPECS; i++) {
        int n = snprintf(text[i], sizeof(text[i]), "%s:%s[-1]", names[i],
                         dtypes[(data[0] >> (2 * i)) & 3]);
        if (pipe_feature_spec_parse(text[i], (size_t)n, &specs[i], err, sizeof(err)) != 0)
            abort();
    }
    const uint8_t *rec = data + 1;
    size_t len = size - 1;

    struct sluice_element e;
    pipe_elem_init(&e);
    if (pipe_elem_resize(&e, NSPECS) != 0)
        abort();
    int rc = pipe_example_decode(rec, len, specs, NSPECS, e.t, err, sizeof(err));
    if (rc != 0 && strncmp(err, "feature '", 9) != 0 && strncmp(err, "malformed", 9) != 0)
        abort();

    Tensorflow__Example *ex = tensorflow__example__unpack(NULL, len, rec);
    if (ex) {
        /* The reader decodes the specs in order and stops at the first failure; check each one
         * on its own so the oracle sees every result. */
        for (size_t i = 0; i < NSPECS; i++) {
            char err1[SLUICE_ERRMSG_SIZE] = "";
            struct sluice_element one;
            pipe_elem_init(&one);
            if (pipe_elem_resize(&one, 1) != 0)
                abort();
            int rc1 = pipe_example_decode(rec, len, &specs[i], 1, one.t, err1, sizeof(err1));
            check_spec(ex, &specs[i], i, rc1, one.t, err1);
            pipe_elem_release(&one);
        }
        tensorflow__example__free_unpacked(ex, NULL);
    }
    pipe_elem_release(&e);
    return 0;
}
