/* Specs to and from serialized DatasetDef messages (proto/dataset.proto).
 *
 * Encoding writes only the fields that belong to each source's and op's kind, so equal specs
 * encode to equal bytes. Decoding takes untrusted bytes: before protobuf-c sees them, a scan of
 * the wire format bounds message nesting (protobuf-c itself recurses without a limit), and after
 * unpacking every field is checked against the invariants listed in parse.c, with fields that do
 * not belong to a kind required to be unset. Anything else is SLUICE_ERR_CORRUPT. */
#include "def.h"

#include "common/error.h"
#include "common/varint.h"
#include "dataset.pb-c.h"
#include "element.h"
#include "pack.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deeper than any valid definition (a tuple of lists nested SLUICE_MAX_RANK deep needs 21
 * levels, and each of the PIPE_MIX_MAX_DEPTH mixes around it 2 more), shallow enough that
 * protobuf-c's recursion stays small. */
#define MAX_MESSAGE_DEPTH 32

/* ---- Encoding ----------------------------------------------------------------------------- */

/* Every allocation of one encoding, released together once the message is packed. */
struct arena {
    void **p;
    size_t n, cap;
};

static void *arena_alloc(struct arena *a, size_t size)
{
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 16;
        void **np = realloc(a->p, nc * sizeof(*np));
        if (!np)
            return NULL;
        a->p = np;
        a->cap = nc;
    }
    void *m = calloc(1, size ? size : 1);
    if (m)
        a->p[a->n++] = m;
    return m;
}

static void arena_free(struct arena *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->p[i]);
    free(a->p);
}

static int value_to_pb(struct arena *a, const struct pipe_value *v, Sluice__Value *pb);

/* Fills *out with pointers to n new messages converted from values. */
static int values_to_pb(struct arena *a, const struct pipe_value *values, size_t n,
                        Sluice__Value ***out)
{
    *out = NULL;
    if (n == 0)
        return 0;
    Sluice__Value **ptrs = arena_alloc(a, n * sizeof(*ptrs));
    Sluice__Value *msgs = arena_alloc(a, n * sizeof(*msgs));
    if (!ptrs || !msgs)
        return SLUICE_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        int rc = value_to_pb(a, &values[i], &msgs[i]);
        if (rc)
            return rc;
        ptrs[i] = &msgs[i];
    }
    *out = ptrs;
    return 0;
}

static int value_to_pb(struct arena *a, const struct pipe_value *v, Sluice__Value *pb)
{
    sluice__value__init(pb);
    switch (v->kind) {
    case PIPE_VAL_INT:
        pb->kind_case = SLUICE__VALUE__KIND_INT_VALUE;
        pb->int_value = v->i;
        return 0;
    case PIPE_VAL_FLOAT:
        pb->kind_case = SLUICE__VALUE__KIND_FLOAT_VALUE;
        pb->float_value = v->f;
        return 0;
    case PIPE_VAL_BYTES:
        pb->kind_case = SLUICE__VALUE__KIND_BYTES_VALUE;
        pb->bytes_value.len = v->slen;
        pb->bytes_value.data = (uint8_t *)v->s;
        return 0;
    case PIPE_VAL_BOOL:
        pb->kind_case = SLUICE__VALUE__KIND_BOOL_VALUE;
        pb->bool_value = v->i != 0;
        return 0;
    case PIPE_VAL_LIST:
    case PIPE_VAL_TUPLE: {
        Sluice__ValueList *l = arena_alloc(a, sizeof(*l));
        if (!l)
            return SLUICE_ERR_NOMEM;
        sluice__value_list__init(l);
        int rc = values_to_pb(a, v->items, v->nitems, &l->items);
        if (rc)
            return rc;
        l->n_items = v->nitems;
        if (v->kind == PIPE_VAL_LIST) {
            pb->kind_case = SLUICE__VALUE__KIND_LIST_VALUE;
            pb->list_value = l;
        } else {
            pb->kind_case = SLUICE__VALUE__KIND_TUPLE_VALUE;
            pb->tuple_value = l;
        }
        return 0;
    }
    }
    return SLUICE_ERR_INVALID;
}

static Sluice__SourceDef__Kind source_kind_to_pb(enum pipe_source_kind k)
{
    switch (k) {
    case PIPE_SRC_RANGE:
        return SLUICE__SOURCE_DEF__KIND__RANGE;
    case PIPE_SRC_LIST:
        return SLUICE__SOURCE_DEF__KIND__LIST;
    case PIPE_SRC_TFRECORD:
        return SLUICE__SOURCE_DEF__KIND__TFRECORD;
    case PIPE_SRC_LINES:
        return SLUICE__SOURCE_DEF__KIND__LINES;
    case PIPE_SRC_TAR:
        return SLUICE__SOURCE_DEF__KIND__TAR;
    case PIPE_SRC_SNAPSHOT:
        return SLUICE__SOURCE_DEF__KIND__SNAPSHOT;
    case PIPE_SRC_PARQUET:
        return SLUICE__SOURCE_DEF__KIND__PARQUET;
    case PIPE_SRC_JSONL:
        return SLUICE__SOURCE_DEF__KIND__JSONL;
    case PIPE_SRC_MEGATRON:
        return SLUICE__SOURCE_DEF__KIND__MEGATRON;
    case PIPE_SRC_SAMPLE:
        return SLUICE__SOURCE_DEF__KIND__SAMPLE_FROM_DATASETS;
    case PIPE_SRC_CHOOSE:
        return SLUICE__SOURCE_DEF__KIND__CHOOSE_FROM_DATASETS;
    }
    return SLUICE__SOURCE_DEF__KIND__RANGE;
}

static Sluice__OpDef__Kind op_kind_to_pb(enum pipe_op_kind k)
{
    switch (k) {
    case PIPE_OP_MAP:
        return SLUICE__OP_DEF__KIND__MAP;
    case PIPE_OP_FILTER:
        return SLUICE__OP_DEF__KIND__FILTER;
    case PIPE_OP_SHUFFLE:
        return SLUICE__OP_DEF__KIND__SHUFFLE;
    case PIPE_OP_BATCH:
        return SLUICE__OP_DEF__KIND__BATCH;
    case PIPE_OP_TAKE:
        return SLUICE__OP_DEF__KIND__TAKE;
    case PIPE_OP_SKIP:
        return SLUICE__OP_DEF__KIND__SKIP;
    case PIPE_OP_REPEAT:
        return SLUICE__OP_DEF__KIND__REPEAT;
    case PIPE_OP_SHARD:
        return SLUICE__OP_DEF__KIND__SHARD;
    case PIPE_OP_PREFETCH:
        return SLUICE__OP_DEF__KIND__PREFETCH;
    case PIPE_OP_GLOBAL_SHUFFLE:
        return SLUICE__OP_DEF__KIND__GLOBAL_SHUFFLE;
    case PIPE_OP_PACK:
        return SLUICE__OP_DEF__KIND__PACK;
    }
    return SLUICE__OP_DEF__KIND__MAP;
}

/* Sets only the fields that belong to op's kind. */
static int op_to_pb(struct arena *a, const struct pipe_op *op, Sluice__OpDef *pb)
{
    sluice__op_def__init(pb);
    pb->kind = op_kind_to_pb(op->kind);
    switch (op->kind) {
    case PIPE_OP_MAP:
    case PIPE_OP_FILTER:
        pb->fn = op->fn ? op->fn : "";
        pb->n_args = op->nargs;
        return values_to_pb(a, op->args, op->nargs, &pb->args);
    case PIPE_OP_GLOBAL_SHUFFLE:
        pb->seed = op->seed;
        return 0;
    case PIPE_OP_SHUFFLE:
        pb->n = op->n;
        pb->has_seed = op->has_seed;
        pb->seed = op->has_seed ? op->seed : 0;
        return 0;
    case PIPE_OP_BATCH:
        pb->n = op->n;
        pb->drop_remainder = op->drop_remainder;
        return 0;
    case PIPE_OP_PACK:
        pb->n = op->n;
        pb->first_fit = op->first_fit;
        pb->window = op->window;
        return 0;
    case PIPE_OP_TAKE:
    case PIPE_OP_SKIP:
    case PIPE_OP_PREFETCH:
        pb->n = op->n;
        return 0;
    case PIPE_OP_REPEAT:
        pb->has_n = op->has_n;
        pb->n = op->has_n ? op->n : 0;
        return 0;
    case PIPE_OP_SHARD:
        pb->n_is_hint = op->n_is_hint;
        pb->n = op->n_is_hint ? 0 : op->n;
        pb->index_is_hint = op->index_is_hint;
        pb->index = op->index_is_hint ? 0 : op->index;
        return 0;
    }
    return 0;
}

static Sluice__DatasetDef *spec_to_pb(struct arena *a, const struct pipe_spec *spec, int *rc);

/* The fields of a mixing source: its input pipelines, weights, seed and choice. */
static int mix_to_pb(struct arena *a, const struct pipe_source *s, Sluice__SourceDef *src)
{
    int rc = 0;
    if (s->ninputs) {
        src->inputs = arena_alloc(a, s->ninputs * sizeof(*src->inputs));
        if (!src->inputs)
            return SLUICE_ERR_NOMEM;
        for (size_t i = 0; i < s->ninputs; i++)
            if (!(src->inputs[i] = spec_to_pb(a, s->inputs[i], &rc)))
                return rc;
        src->n_inputs = s->ninputs;
    }
    src->weights = s->weights;
    src->n_weights = s->nweights;
    src->seed = s->seed;
    src->stop_on_empty = s->stop_on_empty;
    if (s->choice && !(src->choice = spec_to_pb(a, s->choice, &rc)))
        return rc;
    return 0;
}

/* A DatasetDef of spec, every part of it allocated in a; NULL with *rc set on failure. */
static Sluice__DatasetDef *spec_to_pb(struct arena *a, const struct pipe_spec *spec, int *rc)
{
    Sluice__DatasetDef *def = arena_alloc(a, sizeof(*def));
    Sluice__SourceDef *src = arena_alloc(a, sizeof(*src));
    *rc = SLUICE_ERR_NOMEM;
    if (!def || !src)
        return NULL;
    sluice__dataset_def__init(def);
    sluice__source_def__init(src);
    const struct pipe_source *s = &spec->source;
    *rc = 0;
    def->source = src;
    src->kind = source_kind_to_pb(s->kind);
    switch (s->kind) {
    case PIPE_SRC_RANGE:
        src->start = s->start;
        src->stop = s->stop;
        src->step = s->step;
        break;
    case PIPE_SRC_LIST:
        *rc = values_to_pb(a, s->values, s->nvalues, &src->values);
        src->n_values = s->nvalues;
        break;
    case PIPE_SRC_TFRECORD:
    case PIPE_SRC_LINES:
    case PIPE_SRC_SNAPSHOT:
    case PIPE_SRC_MEGATRON:
        src->globs = s->globs;
        src->n_globs = s->nglobs;
        break;
    case PIPE_SRC_TAR:
        src->globs = s->globs;
        src->n_globs = s->nglobs;
        src->exts = s->exts;
        src->n_exts = s->nexts;
        break;
    case PIPE_SRC_PARQUET:
    case PIPE_SRC_JSONL:
        src->globs = s->globs;
        src->n_globs = s->nglobs;
        src->columns = s->columns;
        src->n_columns = s->ncolumns;
        break;
    case PIPE_SRC_SAMPLE:
    case PIPE_SRC_CHOOSE:
        *rc = mix_to_pb(a, s, src);
        break;
    }
    if (*rc)
        return NULL;
    if (spec->nops) {
        Sluice__OpDef **ptrs = arena_alloc(a, spec->nops * sizeof(*ptrs));
        Sluice__OpDef *ops = arena_alloc(a, spec->nops * sizeof(*ops));
        if (!ptrs || !ops) {
            *rc = SLUICE_ERR_NOMEM;
            return NULL;
        }
        for (size_t i = 0; i < spec->nops && *rc == 0; i++) {
            *rc = op_to_pb(a, &spec->ops[i], &ops[i]);
            ptrs[i] = &ops[i];
        }
        if (*rc)
            return NULL;
        def->ops = ptrs;
        def->n_ops = spec->nops;
    }
    return def;
}

int pipe_spec_encode(const struct pipe_spec *spec, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    struct arena a = {0};
    int rc = 0;
    Sluice__DatasetDef *def = spec_to_pb(&a, spec, &rc);
    if (!def)
        goto done;
    def->deterministic = spec->deterministic;
    size_t size = sluice__dataset_def__get_packed_size(def);
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) {
        rc = SLUICE_ERR_NOMEM;
        goto done;
    }
    *len = sluice__dataset_def__pack(def, buf);
    *out = buf;
done:
    arena_free(&a);
    return rc;
}

/* ---- Nesting scan ------------------------------------------------------------------------- */

enum msg_type { M_NONE, M_DATASET, M_SOURCE, M_OP, M_VALUE, M_LIST };

/* The message type of field number f inside a message of type m, M_NONE for non-messages. */
static enum msg_type sub_message(enum msg_type m, uint64_t f)
{
    switch (m) {
    case M_DATASET:
        return f == 1 ? M_SOURCE : f == 2 ? M_OP : M_NONE;
    case M_SOURCE:
        return f == 5 ? M_VALUE : f == 9 || f == 13 ? M_DATASET : M_NONE;
    case M_OP:
        return f == 3 ? M_VALUE : M_NONE;
    case M_VALUE:
        return f == 5 || f == 6 ? M_LIST : M_NONE;
    case M_LIST:
        return f == 1 ? M_VALUE : M_NONE;
    case M_NONE:
        break;
    }
    return M_NONE;
}

enum scan_result { SCAN_OK, SCAN_MALFORMED, SCAN_TOO_DEEP };

/* Walks the wire format of a message of type m, descending into the fields that hold messages.
 * The recursion is bounded by MAX_MESSAGE_DEPTH. */
static enum scan_result scan(const uint8_t *p, size_t len, enum msg_type m, int depth)
{
    if (depth > MAX_MESSAGE_DEPTH)
        return SCAN_TOO_DEEP;
    size_t pos = 0;
    while (pos < len) {
        uint64_t key, v;
        if (!varint_get(p, len, &pos, VARINT_MAX_LEN, &key) || (key >> 3) == 0 ||
            (key >> 3) > 0x1fffffff)
            return SCAN_MALFORMED;
        switch (key & 7) {
        case 0:
            if (!varint_get(p, len, &pos, VARINT_MAX_LEN, &v))
                return SCAN_MALFORMED;
            break;
        case 1:
        case 5: {
            size_t n = (key & 7) == 1 ? 8 : 4;
            if (len - pos < n)
                return SCAN_MALFORMED;
            pos += n;
            break;
        }
        case 2: {
            if (!varint_get(p, len, &pos, VARINT_MAX_LEN, &v) || v > len - pos)
                return SCAN_MALFORMED;
            enum msg_type sub = sub_message(m, key >> 3);
            if (sub != M_NONE) {
                enum scan_result r = scan(p + pos, (size_t)v, sub, depth + 1);
                if (r != SCAN_OK)
                    return r;
            }
            pos += (size_t)v;
            break;
        }
        default: /* groups and undefined wire types */
            return SCAN_MALFORMED;
        }
    }
    return SCAN_OK;
}

/* ---- Decoding ----------------------------------------------------------------------------- */

/* Where a decoding error is, for "dataset definition: WHERE: WHAT". */
struct dec {
    char where[64];
    char *err;
    size_t errlen;
    char nest[96];     /* "input 2: choice: " for the pipelines of mixes, "" at the top */
    size_t npipelines; /* input and choice pipelines decoded so far */
};

static int corrupt(struct dec *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int corrupt(struct dec *d, const char *fmt, ...)
{
    if (d->err && d->errlen > 0) {
        int n = snprintf(d->err, d->errlen, "dataset definition: %s%s%s", d->nest, d->where,
                         d->where[0] ? ": " : "");
        if (n >= 0 && (size_t)n < d->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(d->err + n, d->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return SLUICE_ERR_CORRUPT;
}

static int nomem(struct dec *d)
{
    return err_set(d->err, d->errlen, SLUICE_ERR_NOMEM, "out of memory");
}

static const char *kind_name(enum pipe_value_kind k)
{
    switch (k) {
    case PIPE_VAL_INT:
        return "an integer";
    case PIPE_VAL_FLOAT:
        return "a float";
    case PIPE_VAL_BYTES:
        return "a string";
    case PIPE_VAL_BOOL:
        return "a boolean";
    case PIPE_VAL_LIST:
        return "a list";
    case PIPE_VAL_TUPLE:
        return "a tuple";
    }
    return "a value";
}

static int value_from_pb(struct dec *d, const Sluice__Value *pb, struct pipe_value *out,
                         const struct pipe_value *tmpl, int lists, bool tuple_ok);

/* Converts the items of a list or tuple; see parse_items() in parse.c for the rules. */
static int items_from_pb(struct dec *d, const Sluice__ValueList *l, struct pipe_value *out,
                         const struct pipe_value *tmpl, int lists, bool is_list)
{
    size_t n = l ? l->n_items : 0;
    if (n == 0)
        return corrupt(d, "empty %s", is_list ? "list" : "tuple");
    if (tmpl && n != tmpl->nitems)
        return corrupt(d, "expected %s of %zu items, found %zu", is_list ? "a list" : "a tuple",
                       tmpl->nitems, n);
    if (!is_list && (n < 2 || n > PIPE_MAX_COMPONENTS))
        return corrupt(d, "expected a tuple of 2 to %d components, found %zu", PIPE_MAX_COMPONENTS,
                       n);
    struct pipe_value *items = calloc(n, sizeof(*items));
    if (!items)
        return nomem(d);
    size_t done = 0;
    int rc = 0;
    for (; done < n; done++) {
        const struct pipe_value *item_tmpl = NULL;
        if (tmpl)
            item_tmpl = &tmpl->items[is_list ? 0 : done];
        else if (is_list && done > 0)
            item_tmpl = &items[0];
        rc = value_from_pb(d, l->items[done], &items[done], item_tmpl, is_list ? lists + 1 : lists,
                           false);
        if (rc)
            break;
    }
    if (rc) {
        for (size_t i = 0; i < done; i++)
            pipe_value_release(&items[i]);
        free(items);
        return rc;
    }
    out->kind = is_list ? PIPE_VAL_LIST : PIPE_VAL_TUPLE;
    out->items = items;
    out->nitems = n;
    return 0;
}

/* Converts one value into out (zeroed by the caller; holds nothing on failure), checking it
 * against tmpl when given. The recursion is bounded by the list nesting check. */
static int value_from_pb(struct dec *d, const Sluice__Value *pb, struct pipe_value *out,
                         const struct pipe_value *tmpl, int lists, bool tuple_ok)
{
    enum pipe_value_kind kind;
    switch (pb->kind_case) {
    case SLUICE__VALUE__KIND_INT_VALUE:
        kind = PIPE_VAL_INT;
        break;
    case SLUICE__VALUE__KIND_FLOAT_VALUE:
        kind = PIPE_VAL_FLOAT;
        break;
    case SLUICE__VALUE__KIND_BYTES_VALUE:
        kind = PIPE_VAL_BYTES;
        break;
    case SLUICE__VALUE__KIND_BOOL_VALUE:
        kind = PIPE_VAL_BOOL;
        break;
    case SLUICE__VALUE__KIND_LIST_VALUE:
        kind = PIPE_VAL_LIST;
        break;
    case SLUICE__VALUE__KIND_TUPLE_VALUE:
        kind = PIPE_VAL_TUPLE;
        break;
    default:
        return corrupt(d, "a value without a kind");
    }
    if (tmpl && tmpl->kind != kind)
        return corrupt(d, "expected %s, found %s", kind_name(tmpl->kind), kind_name(kind));
    switch (kind) {
    case PIPE_VAL_INT:
        out->i = pb->int_value;
        break;
    case PIPE_VAL_FLOAT:
        if (!isfinite(pb->float_value))
            return corrupt(d, "expected a finite number, found %g", pb->float_value);
        out->f = pb->float_value;
        break;
    case PIPE_VAL_BYTES:
        out->s = malloc(pb->bytes_value.len + 1);
        if (!out->s)
            return nomem(d);
        if (pb->bytes_value.len)
            memcpy(out->s, pb->bytes_value.data, pb->bytes_value.len);
        out->s[pb->bytes_value.len] = '\0';
        out->slen = pb->bytes_value.len;
        break;
    case PIPE_VAL_BOOL:
        out->i = pb->bool_value != 0;
        break;
    case PIPE_VAL_LIST:
        if (lists >= SLUICE_MAX_RANK)
            return corrupt(d, "lists nest deeper than %d levels", SLUICE_MAX_RANK);
        return items_from_pb(d, pb->list_value, out, tmpl, lists, true);
    case PIPE_VAL_TUPLE:
        if (!tuple_ok)
            return corrupt(d, "a tuple is only allowed as a whole list() value");
        return items_from_pb(d, pb->tuple_value, out, tmpl, lists, false);
    }
    out->kind = kind;
    return 0;
}

/* Converts n values into a new array; with same_structure, every value must have the structure
 * of the first (list() values), otherwise each stands alone (function arguments). */
static int values_from_pb(struct dec *d, Sluice__Value *const *pb, size_t n, bool is_source,
                          struct pipe_value **out, size_t *nout)
{
    if (n == 0)
        return 0;
    struct pipe_value *v = calloc(n, sizeof(*v));
    if (!v)
        return nomem(d);
    *out = v;
    size_t prefix = strlen(d->where);
    for (; *nout < n; (*nout)++) {
        snprintf(d->where + prefix, sizeof(d->where) - prefix, " %s %zu",
                 is_source ? "value" : "argument", *nout + 1);
        const struct pipe_value *tmpl = is_source && *nout > 0 ? &v[0] : NULL;
        int rc = value_from_pb(d, pb[*nout], &v[*nout], tmpl, 0, is_source);
        if (rc)
            return rc;
    }
    d->where[prefix] = '\0';
    return 0;
}

static const char *const source_names[] = {"range",
                                           "list",
                                           "tfrecord",
                                           "lines",
                                           "tar",
                                           "snapshot",
                                           "parquet",
                                           "jsonl",
                                           "megatron",
                                           "sample_from_datasets",
                                           "choose_from_datasets"};
static const char *const op_names[] = {"map",      "filter",         "shuffle", "batch",
                                       "take",     "skip",           "repeat",  "shard",
                                       "prefetch", "global_shuffle", "pack"};

/* Copies n strings (a missing one read as "") into a new array, raising *nout as each is copied
 * so that pipe_spec_free() releases a partial copy. */
static int strs_from_pb(struct dec *d, char *const *pb, size_t n, char ***out, size_t *nout)
{
    *out = calloc(n, sizeof(**out));
    if (!*out)
        return nomem(d);
    for (; *nout < n; (*nout)++) {
        const char *str = pb[*nout] ? pb[*nout] : "";
        size_t len = strlen(str) + 1;
        if (!((*out)[*nout] = malloc(len)))
            return nomem(d);
        memcpy((*out)[*nout], str, len);
    }
    return 0;
}

static int spec_from_pb(struct dec *d, const Sluice__DatasetDef *def, int depth,
                        struct pipe_spec **out);

/* Decodes one input or choice pipeline of a mix, naming it in the messages of its errors. */
static int nested_from_pb(struct dec *d, const Sluice__DatasetDef *pb, const char *what, size_t i,
                          int depth, struct pipe_spec **out)
{
    if (d->npipelines >= PIPE_MIX_MAX_PIPELINES)
        return corrupt(d, "more than %d mixed pipelines", PIPE_MIX_MAX_PIPELINES);
    d->npipelines++;
    size_t prefix = strlen(d->nest);
    if (i == SIZE_MAX)
        snprintf(d->nest + prefix, sizeof(d->nest) - prefix, "%s: ", what);
    else
        snprintf(d->nest + prefix, sizeof(d->nest) - prefix, "%s %zu: ", what, i);
    int rc = 0;
    if (!pb)
        rc = corrupt(d, "missing pipeline");
    else if (pb->deterministic)
        rc = corrupt(d, "deterministic belongs to the whole definition only");
    else
        rc = spec_from_pb(d, pb, depth, out);
    if (rc == 0)
        d->nest[prefix] = '\0';
    return rc;
}

/* sample_from_datasets and choose_from_datasets; depth counts the mixes around this one. */
static int mix_from_pb(struct dec *d, const Sluice__SourceDef *pb, struct pipe_source *s, int depth)
{
    if (depth >= PIPE_MIX_MAX_DEPTH)
        return corrupt(d, "mixes nest deeper than %d levels", PIPE_MIX_MAX_DEPTH);
    if (pb->n_inputs == 0 || pb->n_inputs > PIPE_MIX_MAX_INPUTS)
        return corrupt(d, "expected 1 to %d inputs, found %zu", PIPE_MIX_MAX_INPUTS, pb->n_inputs);
    if (s->kind == PIPE_SRC_SAMPLE && pb->n_weights != pb->n_inputs)
        return corrupt(d, "expected %zu weights (one per input), found %zu", pb->n_inputs,
                       pb->n_weights);
    if (s->kind == PIPE_SRC_CHOOSE && !pb->choice)
        return corrupt(d, "expected a choice pipeline");
    if (pb->n_weights) {
        if (!(s->weights = malloc(pb->n_weights * sizeof(*s->weights))))
            return nomem(d);
        memcpy(s->weights, pb->weights, pb->n_weights * sizeof(*s->weights));
        s->nweights = pb->n_weights;
        for (size_t i = 0; i < s->nweights; i++)
            if (s->weights[i] == 0)
                s->weights[i] = 0; /* -0.0 reads as 0, as in the text */
    }
    s->seed = pb->seed;
    s->stop_on_empty = pb->stop_on_empty;
    if (!(s->inputs = calloc(pb->n_inputs, sizeof(*s->inputs))))
        return nomem(d);
    char where[sizeof d->where];
    memcpy(where, d->where, sizeof where);
    for (; s->ninputs < pb->n_inputs; s->ninputs++) {
        int rc = nested_from_pb(d, pb->inputs[s->ninputs], "input", s->ninputs, depth + 1,
                                &s->inputs[s->ninputs]);
        if (rc)
            return rc;
    }
    if (pb->choice) {
        int rc = nested_from_pb(d, pb->choice, "choice", SIZE_MAX, depth + 1, &s->choice);
        if (rc)
            return rc;
    }
    memcpy(d->where, where, sizeof where);
    const char *want = pipe_mix_problem(s);
    if (want)
        return corrupt(d, "expected %s", want);
    return 0;
}

static int source_from_pb(struct dec *d, const Sluice__SourceDef *pb, struct pipe_source *s,
                          int depth)
{
    if (!pb)
        return corrupt(d, "missing source");
    snprintf(d->where, sizeof(d->where), "source");
    if ((unsigned)pb->kind > SLUICE__SOURCE_DEF__KIND__CHOOSE_FROM_DATASETS)
        return corrupt(d, "unknown kind %d", (int)pb->kind);
    s->kind = (enum pipe_source_kind)pb->kind;
    snprintf(d->where, sizeof(d->where), "source %s", source_names[s->kind]);
    bool is_range = s->kind == PIPE_SRC_RANGE;
    bool is_list = s->kind == PIPE_SRC_LIST;
    if (!is_range && (pb->start || pb->stop || pb->step))
        return corrupt(d, "start, stop and step belong to range only");
    if (!is_list && pb->n_values)
        return corrupt(d, "values belong to list only");
    if ((is_range || is_list) && pb->n_globs)
        return corrupt(d, "globs belong to file sources only");
    if (s->kind != PIPE_SRC_TAR && pb->n_exts)
        return corrupt(d, "exts belong to tar only");
    if (s->kind != PIPE_SRC_PARQUET && s->kind != PIPE_SRC_JSONL && pb->n_columns)
        return corrupt(d, "columns belong to parquet and jsonl only");
    bool mix = pipe_source_mixes(s->kind);
    if (mix && (pb->start || pb->stop || pb->step || pb->n_globs))
        return corrupt(d, "start, stop, step and globs do not belong to a mix");
    if (!mix && (pb->n_inputs || pb->stop_on_empty))
        return corrupt(d, "inputs and stop_on_empty belong to mixes only");
    if (s->kind != PIPE_SRC_SAMPLE && (pb->n_weights || pb->seed))
        return corrupt(d, "weights and seed belong to sample_from_datasets only");
    if (s->kind != PIPE_SRC_CHOOSE && pb->choice)
        return corrupt(d, "choice belongs to choose_from_datasets only");
    switch (s->kind) {
    case PIPE_SRC_SAMPLE:
    case PIPE_SRC_CHOOSE:
        return mix_from_pb(d, pb, s, depth);
    case PIPE_SRC_RANGE:
        if (pb->step == 0)
            return corrupt(d, "expected a nonzero step, found 0");
        s->start = pb->start;
        s->stop = pb->stop;
        s->step = pb->step;
        return 0;
    case PIPE_SRC_LIST:
        if (pb->n_values == 0)
            return corrupt(d, "expected at least one value");
        return values_from_pb(d, pb->values, pb->n_values, true, &s->values, &s->nvalues);
    case PIPE_SRC_TFRECORD:
    case PIPE_SRC_LINES:
        if (pb->n_globs == 0)
            return corrupt(d, "expected at least one file pattern");
        return strs_from_pb(d, pb->globs, pb->n_globs, &s->globs, &s->nglobs);
    case PIPE_SRC_SNAPSHOT:
        if (pb->n_globs != 1)
            return corrupt(d, "expected one directory, found %zu", pb->n_globs);
        if (!pb->globs[0] || !pb->globs[0][0])
            return corrupt(d, "expected a directory, found \"\"");
        return strs_from_pb(d, pb->globs, pb->n_globs, &s->globs, &s->nglobs);
    case PIPE_SRC_MEGATRON:
        if (pb->n_globs != 1)
            return corrupt(d, "expected one prefix, found %zu", pb->n_globs);
        if (!pb->globs[0] || !pb->globs[0][0])
            return corrupt(d, "expected a prefix, found \"\"");
        return strs_from_pb(d, pb->globs, pb->n_globs, &s->globs, &s->nglobs);
    case PIPE_SRC_TAR:
    case PIPE_SRC_PARQUET:
    case PIPE_SRC_JSONL: {
        /* tar: 1 to 64 member extensions; parquet: 0 to 64 columns; jsonl: 1 to 64 fields. */
        bool tar = s->kind == PIPE_SRC_TAR;
        char **args = tar ? pb->exts : pb->columns;
        size_t nargs = tar ? pb->n_exts : pb->n_columns;
        const char *what = tar ? "extension" : s->kind == PIPE_SRC_JSONL ? "field" : "column";
        if (pb->n_globs == 0)
            return corrupt(d, "expected at least one file pattern");
        if ((nargs == 0 && s->kind != PIPE_SRC_PARQUET) || nargs > PIPE_MAX_COMPONENTS)
            return corrupt(d, "expected %d to %d %ss, found %zu",
                           s->kind == PIPE_SRC_PARQUET ? 0 : 1, PIPE_MAX_COMPONENTS, what, nargs);
        for (size_t i = 0; i < nargs; i++) {
            if (!args[i])
                return corrupt(d, "%s %zu: missing", what, i + 1);
            const char *want = pipe_source_arg_problem(s->kind, args, i);
            if (want)
                return corrupt(d, "%s %zu: expected %s, found \"%.32s\"", what, i + 1, want,
                               args[i]);
        }
        int rc = strs_from_pb(d, pb->globs, pb->n_globs, &s->globs, &s->nglobs);
        if (rc)
            return rc;
        return tar ? strs_from_pb(d, args, nargs, &s->exts, &s->nexts)
                   : strs_from_pb(d, args, nargs, &s->columns, &s->ncolumns);
    }
    }
    return 0;
}

static bool is_identifier(const char *s)
{
    if (!s || !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
        return false;
    for (s++; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_' ||
              (*s >= '0' && *s <= '9')))
            return false;
    return true;
}

/* The optional fields of OpDef, for the check that an op sets only its own. */
enum op_field {
    F_FN = 1 << 0,
    F_ARGS = 1 << 1,
    F_N = 1 << 2,
    F_HAS_N = 1 << 3,
    F_SEED = 1 << 4,
    F_HAS_SEED = 1 << 5,
    F_DROP = 1 << 6,
    F_INDEX = 1 << 7,
    F_N_HINT = 1 << 8,
    F_INDEX_HINT = 1 << 9,
    F_FIRST_FIT = 1 << 10,
    F_WINDOW = 1 << 11,
};

static const char *const field_names[] = {
    "fn",        "args",           "n",     "has_n",     "seed",
    "has_seed",  "drop_remainder", "index", "n_is_hint", "index_is_hint",
    "first_fit", "window"};

static unsigned allowed_fields(enum pipe_op_kind k)
{
    switch (k) {
    case PIPE_OP_MAP:
    case PIPE_OP_FILTER:
        return F_FN | F_ARGS;
    case PIPE_OP_SHUFFLE:
        return F_N | F_SEED | F_HAS_SEED;
    case PIPE_OP_BATCH:
        return F_N | F_DROP;
    case PIPE_OP_TAKE:
    case PIPE_OP_SKIP:
    case PIPE_OP_PREFETCH:
        return F_N;
    case PIPE_OP_REPEAT:
        return F_N | F_HAS_N;
    case PIPE_OP_SHARD:
        return F_N | F_INDEX | F_N_HINT | F_INDEX_HINT;
    case PIPE_OP_GLOBAL_SHUFFLE:
        return F_SEED;
    case PIPE_OP_PACK:
        return F_N | F_FIRST_FIT | F_WINDOW;
    }
    return 0;
}

static int op_from_pb(struct dec *d, size_t idx, const Sluice__OpDef *pb, struct pipe_op *op)
{
    snprintf(d->where, sizeof(d->where), "op %zu", idx + 1);
    if ((unsigned)pb->kind > SLUICE__OP_DEF__KIND__PACK)
        return corrupt(d, "unknown kind %d", (int)pb->kind);
    op->kind = (enum pipe_op_kind)pb->kind;
    snprintf(d->where, sizeof(d->where), "op %zu (%s)", idx + 1, op_names[op->kind]);
    unsigned set = (pb->fn && pb->fn[0] ? F_FN : 0) | (pb->n_args ? F_ARGS : 0) |
                   (pb->n ? F_N : 0) | (pb->has_n ? F_HAS_N : 0) | (pb->seed ? F_SEED : 0) |
                   (pb->has_seed ? F_HAS_SEED : 0) | (pb->drop_remainder ? F_DROP : 0) |
                   (pb->index ? F_INDEX : 0) | (pb->n_is_hint ? F_N_HINT : 0) |
                   (pb->index_is_hint ? F_INDEX_HINT : 0) | (pb->first_fit ? F_FIRST_FIT : 0) |
                   (pb->window ? F_WINDOW : 0);
    unsigned extra = set & ~allowed_fields(op->kind);
    if (extra) {
        unsigned bit = 0;
        while (!(extra & (1u << bit)))
            bit++;
        return corrupt(d, "field %s does not belong to %s", field_names[bit], op_names[op->kind]);
    }
    switch (op->kind) {
    case PIPE_OP_MAP:
    case PIPE_OP_FILTER: {
        if (!is_identifier(pb->fn))
            return corrupt(d, "expected a function name, found \"%.32s\"", pb->fn ? pb->fn : "");
        size_t n = strlen(pb->fn) + 1;
        if (!(op->fn = malloc(n)))
            return nomem(d);
        memcpy(op->fn, pb->fn, n);
        return values_from_pb(d, pb->args, pb->n_args, false, &op->args, &op->nargs);
    }
    case PIPE_OP_SHUFFLE:
        if (pb->n < 1)
            return corrupt(d, "expected a buffer size >= 1, found %lld", (long long)pb->n);
        if (pb->seed && !pb->has_seed)
            return corrupt(d, "seed is set but has_seed is not");
        op->n = pb->n;
        op->has_seed = pb->has_seed;
        op->seed = pb->seed;
        return 0;
    case PIPE_OP_BATCH:
        if (pb->n < 1)
            return corrupt(d, "expected a batch size >= 1, found %lld", (long long)pb->n);
        op->n = pb->n;
        op->drop_remainder = pb->drop_remainder;
        return 0;
    case PIPE_OP_PACK: {
        const char *why = pipe_pack_problem(pb->n, pb->window);
        if (why)
            return corrupt(d, "%s (sequence length %lld, window %lld)", why, (long long)pb->n,
                           (long long)pb->window);
        op->n = pb->n;
        op->first_fit = pb->first_fit;
        op->window = pb->window;
        return 0;
    }
    case PIPE_OP_TAKE:
    case PIPE_OP_SKIP:
        if (pb->n < -1)
            return corrupt(d, "expected a count >= 0 (or -1 for all), found %lld",
                           (long long)pb->n);
        op->n = pb->n;
        return 0;
    case PIPE_OP_REPEAT:
        if (pb->n && !pb->has_n)
            return corrupt(d, "n is set but has_n is not");
        if (pb->n < 0)
            return corrupt(d, "expected a count >= 0, found %lld", (long long)pb->n);
        op->has_n = pb->has_n;
        op->n = pb->n;
        return 0;
    case PIPE_OP_SHARD:
        if (pb->n_is_hint && pb->n)
            return corrupt(d, "n is set but n_is_hint says SHARD_HINT");
        if (pb->index_is_hint && pb->index)
            return corrupt(d, "index is set but index_is_hint says SHARD_HINT");
        if (!pb->n_is_hint && pb->n < 1)
            return corrupt(d, "expected a shard count >= 1, found %lld", (long long)pb->n);
        if (!pb->index_is_hint && pb->index < 0)
            return corrupt(d, "expected a shard index >= 0, found %lld", (long long)pb->index);
        if (!pb->index_is_hint && !pb->n_is_hint && pb->index >= pb->n)
            return corrupt(d, "expected a shard index in [0, %lld), found %lld", (long long)pb->n,
                           (long long)pb->index);
        op->n_is_hint = pb->n_is_hint;
        op->index_is_hint = pb->index_is_hint;
        op->n = pb->n;
        op->index = pb->index;
        return 0;
    case PIPE_OP_PREFETCH:
        if (pb->n < 1)
            return corrupt(d, "expected a buffer size >= 1, found %lld", (long long)pb->n);
        op->n = pb->n;
        return 0;
    case PIPE_OP_GLOBAL_SHUFFLE:
        /* The parser's rule: the source applies it, so nothing may come between them. */
        if (idx != 0)
            return corrupt(d, "global_shuffle must be the first operation");
        op->seed = pb->seed;
        return 0;
    }
    return 0;
}

int pipe_spec_decode(const uint8_t *data, size_t len, struct pipe_spec **out, char *err,
                     size_t errlen)
{
    *out = NULL;
    struct dec d = {.err = err, .errlen = errlen};
    switch (scan(data, len, M_DATASET, 1)) {
    case SCAN_OK:
        break;
    case SCAN_MALFORMED:
        return corrupt(&d, "malformed protobuf");
    case SCAN_TOO_DEEP:
        return corrupt(&d, "messages nest deeper than %d levels", MAX_MESSAGE_DEPTH);
    }
    Sluice__DatasetDef *def = sluice__dataset_def__unpack(NULL, len, data);
    if (!def)
        return corrupt(&d, "not a valid DatasetDef message");
    struct pipe_spec *spec = NULL;
    int rc = spec_from_pb(&d, def, 0, &spec);
    if (rc == 0)
        spec->deterministic = def->deterministic;
    sluice__dataset_def__free_unpacked(def, NULL);
    if (rc)
        return rc;
    *out = spec;
    return 0;
}

/* A spec from one DatasetDef (the whole definition at depth 0, a mix's pipeline below it). */
static int spec_from_pb(struct dec *d, const Sluice__DatasetDef *def, int depth,
                        struct pipe_spec **out)
{
    *out = NULL;
    int rc = 0;
    struct pipe_spec *spec = calloc(1, sizeof(*spec));
    if (!spec)
        return nomem(d);
    rc = source_from_pb(d, def->source, &spec->source, depth);
    if (rc)
        goto done;
    if (def->n_ops) {
        spec->ops = calloc(def->n_ops, sizeof(*spec->ops));
        if (!spec->ops) {
            rc = nomem(d);
            goto done;
        }
    }
    /* Each op counts as soon as it is started, so pipe_spec_free() releases a partial one. */
    for (; spec->nops < def->n_ops;) {
        struct pipe_op *op = &spec->ops[spec->nops++];
        rc = op_from_pb(d, spec->nops - 1, def->ops[spec->nops - 1], op);
        if (rc)
            goto done;
    }
done:
    if (rc) {
        pipe_spec_free(spec);
        return rc;
    }
    *out = spec;
    return 0;
}
