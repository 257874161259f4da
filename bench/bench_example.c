/* bench_example: parse_example's wire reader against protobuf-c's generated unpacker.
 *
 * Both turn the same serialized tf.train.Example into the same dense tensors (the outputs are
 * compared): the reader with pipe_example_decode(), protobuf-c with tensorflow__example__unpack()
 * (proto/example.proto), a lookup of each wanted key (the last entry wins) and a copy of its
 * values, then free_unpacked(). Three records:
 *   image  an ImageNet-style record: 110 KB of JPEG bytes and four small features, three wanted;
 *   wide   2000 int64 features and 2000 float features, three wanted;
 *   long   one list of 100000 packed floats and one of 20000 int64s, both wanted.
 * Prints records per second for both and the ratio reader / protobuf-c.
 *
 *   bench_example [SECONDS_PER_CASE]      default 1 */
#include "example.pb-c.h"
#include "pipeline/element.h"
#include "pipeline/example.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- Building records with protobuf-c ---------------------------------------------------- */

struct builder {
    Tensorflow__Features features;
    Tensorflow__Features__FeatureEntry **entries;
    size_t n, cap;
};

static Tensorflow__Feature *add_entry(struct builder *b, const char *key)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 16;
        b->entries = realloc(b->entries, b->cap * sizeof(*b->entries));
    }
    Tensorflow__Features__FeatureEntry *e = calloc(1, sizeof(*e));
    tensorflow__features__feature_entry__init(e);
    e->key.data = (uint8_t *)strdup(key);
    e->key.len = strlen(key);
    e->value = calloc(1, sizeof(*e->value));
    tensorflow__feature__init(e->value);
    b->entries[b->n++] = e;
    return e->value;
}

static void add_int64s(struct builder *b, const char *key, const int64_t *v, size_t n)
{
    Tensorflow__Feature *f = add_entry(b, key);
    Tensorflow__Int64List *l = calloc(1, sizeof(*l));
    tensorflow__int64_list__init(l);
    l->value = malloc(n * sizeof(int64_t));
    memcpy(l->value, v, n * sizeof(int64_t));
    l->n_value = n;
    f->kind_case = TENSORFLOW__FEATURE__KIND_INT64_LIST;
    f->int64_list = l;
}

static void add_floats(struct builder *b, const char *key, const float *v, size_t n)
{
    Tensorflow__Feature *f = add_entry(b, key);
    Tensorflow__FloatList *l = calloc(1, sizeof(*l));
    tensorflow__float_list__init(l);
    l->value = malloc(n * sizeof(float));
    memcpy(l->value, v, n * sizeof(float));
    l->n_value = n;
    f->kind_case = TENSORFLOW__FEATURE__KIND_FLOAT_LIST;
    f->float_list = l;
}

static void add_bytes(struct builder *b, const char *key, const void *v, size_t n)
{
    Tensorflow__Feature *f = add_entry(b, key);
    Tensorflow__BytesList *l = calloc(1, sizeof(*l));
    tensorflow__bytes_list__init(l);
    l->value = malloc(sizeof(ProtobufCBinaryData));
    l->value[0].data = malloc(n);
    memcpy(l->value[0].data, v, n);
    l->value[0].len = n;
    l->n_value = 1;
    f->kind_case = TENSORFLOW__FEATURE__KIND_BYTES_LIST;
    f->bytes_list = l;
}

/* Serializes and frees the builder's message. */
static uint8_t *finish(struct builder *b, size_t *len)
{
    b->features.feature = b->entries;
    b->features.n_feature = b->n;
    Tensorflow__Example ex = TENSORFLOW__EXAMPLE__INIT;
    ex.features = &b->features;
    *len = tensorflow__example__get_packed_size(&ex);
    uint8_t *out = malloc(*len);
    tensorflow__example__pack(&ex, out);
    for (size_t i = 0; i < b->n; i++)
        protobuf_c_message_free_unpacked(&b->entries[i]->base, NULL);
    free(b->entries);
    return out;
}

/* ---- The protobuf-c path ----------------------------------------------------------------- */

/* Decodes through protobuf-c into the same tensors pipe_example_decode() fills (scalars and
 * fixed or variable rank-1 shapes, no defaults: what the cases use). Returns 0 or -1. */
static int pbc_decode(const uint8_t *rec, size_t len, const struct pipe_feature_spec *specs,
                      size_t n, struct pipe_tensor *out)
{
    Tensorflow__Example *ex = tensorflow__example__unpack(NULL, len, rec);
    if (!ex)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const struct pipe_feature_spec *s = &specs[i];
        Tensorflow__Feature *f = NULL;
        for (size_t j = 0; ex->features && j < ex->features->n_feature; j++) {
            Tensorflow__Features__FeatureEntry *e = ex->features->feature[j];
            if (e->key.len == s->name_len && memcmp(e->key.data, s->name, s->name_len) == 0)
                f = e->value;
        }
        struct pipe_tensor *t = &out[i];
        t->dtype = s->dtype;
        t->rank = s->rank;
        memcpy(t->shape, s->shape, sizeof(t->shape));
        if (!f) {
            rc = -1;
        } else if (s->dtype == SLUICE_INT64 &&
                   f->kind_case == TENSORFLOW__FEATURE__KIND_INT64_LIST) {
            size_t nv = f->int64_list->n_value;
            pipe_tensor_reserve(t, nv * 8, nv);
            memcpy(t->data, f->int64_list->value, nv * 8);
            t->len = nv * 8;
            if (s->variable)
                t->shape[0] = (int64_t)nv;
        } else if (s->dtype == SLUICE_FLOAT32 &&
                   f->kind_case == TENSORFLOW__FEATURE__KIND_FLOAT_LIST) {
            size_t nv = f->float_list->n_value;
            pipe_tensor_reserve(t, nv * 4, nv);
            memcpy(t->data, f->float_list->value, nv * 4);
            t->len = nv * 4;
            if (s->variable)
                t->shape[0] = (int64_t)nv;
        } else if (s->dtype == SLUICE_BYTES &&
                   f->kind_case == TENSORFLOW__FEATURE__KIND_BYTES_LIST &&
                   f->bytes_list->n_value == 1) {
            size_t bl = f->bytes_list->value[0].len;
            pipe_tensor_reserve(t, bl, 1);
            memcpy(t->data, f->bytes_list->value[0].data, bl);
            t->len = bl;
            t->offs[0] = 0;
            t->offs[1] = bl;
        } else {
            rc = -1;
        }
    }
    tensorflow__example__free_unpacked(ex, NULL);
    return rc;
}

/* ---- Timing ------------------------------------------------------------------------------ */

struct bench_case {
    const char *name;
    uint8_t *rec;
    size_t len;
    const char *const *spec_text;
    size_t n;
};

static int decode_ours(const struct bench_case *c, const struct pipe_feature_spec *s,
                       struct pipe_tensor *out)
{
    char err[SLUICE_ERRMSG_SIZE];
    return pipe_example_decode(c->rec, c->len, s, c->n, out, err, sizeof(err));
}

static int decode_pbc(const struct bench_case *c, const struct pipe_feature_spec *s,
                      struct pipe_tensor *out)
{
    return pbc_decode(c->rec, c->len, s, c->n, out);
}

static double
rate(const struct bench_case *c, const struct pipe_feature_spec *s, struct pipe_tensor *out,
     int (*fn)(const struct bench_case *, const struct pipe_feature_spec *, struct pipe_tensor *),
     double seconds)
{
    long n = 0;
    double start = now_s(), t;
    do {
        for (int k = 0; k < 16; k++) {
            if (fn(c, s, out) != 0) {
                fprintf(stderr, "bench_example: %s: decode failed\n", c->name);
                exit(1);
            }
        }
        n += 16;
        t = now_s() - start;
    } while (t < seconds);
    return (double)n / t;
}

static bool same(const struct pipe_tensor *a, const struct pipe_tensor *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (a[i].dtype != b[i].dtype || a[i].rank != b[i].rank || a[i].len != b[i].len ||
            memcmp(a[i].shape, b[i].shape, (size_t)a[i].rank * 8) != 0 ||
            memcmp(a[i].data, b[i].data, a[i].len) != 0)
            return false;
    }
    return true;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    srand(1);

    struct builder b = {0};
    tensorflow__features__init(&b.features);
    size_t jpg_len = 110 * 1000;
    uint8_t *jpg = malloc(jpg_len);
    for (size_t i = 0; i < jpg_len; i++)
        jpg[i] = (uint8_t)rand();
    int64_t v;
    add_bytes(&b, "image/encoded", jpg, jpg_len);
    add_bytes(&b, "image/format", "JPEG", 4);
    v = 500;
    add_int64s(&b, "image/width", &v, 1);
    v = 375;
    add_int64s(&b, "image/height", &v, 1);
    v = 417;
    add_int64s(&b, "image/class/label", &v, 1);
    size_t image_len;
    uint8_t *image = finish(&b, &image_len);
    static const char *const image_specs[] = {"image/encoded:bytes", "image/class/label:int64",
                                              "image/height:int64"};

    struct builder w = {0};
    tensorflow__features__init(&w.features);
    char key[64];
    for (int i = 0; i < 2000; i++) {
        snprintf(key, sizeof(key), "int_feature_%04d", i);
        v = i * 7;
        add_int64s(&w, key, &v, 1);
        snprintf(key, sizeof(key), "float_feature_%04d", i);
        float f = (float)i * 0.5f;
        add_floats(&w, key, &f, 1);
    }
    size_t wide_len;
    uint8_t *wide = finish(&w, &wide_len);
    static const char *const wide_specs[] = {"int_feature_0001:int64", "int_feature_1999:int64",
                                             "float_feature_1000:float32"};

    struct builder l = {0};
    tensorflow__features__init(&l.features);
    float *fl = malloc(100000 * sizeof(float));
    for (int i = 0; i < 100000; i++)
        fl[i] = (float)i / 3.0f;
    int64_t *il = malloc(20000 * sizeof(int64_t));
    for (int i = 0; i < 20000; i++)
        il[i] = (int64_t)i * 1000003;
    add_floats(&l, "embedding", fl, 100000);
    add_int64s(&l, "tokens", il, 20000);
    size_t long_len;
    uint8_t *longrec = finish(&l, &long_len);
    static const char *const long_specs[] = {"embedding:float32[100000]", "tokens:int64[-1]"};

    struct bench_case cases[] = {
        {"image", image, image_len, image_specs, 3},
        {"wide", wide, wide_len, wide_specs, 3},
        {"long", longrec, long_len, long_specs, 2},
    };
    printf("parse_example: wire reader vs protobuf-c unpack (records/s, best of 3)\n");
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct bench_case *c = &cases[k];
        struct pipe_feature_spec specs[4];
        char err[SLUICE_ERRMSG_SIZE];
        for (size_t i = 0; i < c->n; i++)
            if (pipe_feature_spec_parse(c->spec_text[i], strlen(c->spec_text[i]), &specs[i], err,
                                        sizeof(err)) != 0) {
                fprintf(stderr, "bench_example: %s\n", err);
                return 1;
            }
        struct pipe_tensor ours[4] = {0}, theirs[4] = {0};
        if (decode_ours(c, specs, ours) != 0 || decode_pbc(c, specs, theirs) != 0 ||
            !same(ours, theirs, c->n)) {
            fprintf(stderr, "bench_example: %s: the two decoders disagree\n", c->name);
            return 1;
        }
        double r_ours = 0, r_pbc = 0;
        for (int round = 0; round < 3; round++) {
            double a = rate(c, specs, ours, decode_ours, seconds / 3);
            double p = rate(c, specs, theirs, decode_pbc, seconds / 3);
            r_ours = a > r_ours ? a : r_ours;
            r_pbc = p > r_pbc ? p : r_pbc;
        }
        printf("  %-6s %8zu bytes  reader %10.0f/s  protobuf-c %10.0f/s  ratio %.1f\n", c->name,
               c->len, r_ours, r_pbc, r_ours / r_pbc);
        for (size_t i = 0; i < c->n; i++) {
            free(ours[i].data);
            free(ours[i].offs);
            free(theirs[i].data);
            free(theirs[i].offs);
        }
    }
    free(jpg);
    free(fl);
    free(il);
    free(image);
    free(wide);
    free(longrec);
    return 0;
}
