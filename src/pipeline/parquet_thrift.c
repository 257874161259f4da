#include "parquet_thrift.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

/* Compact protocol wire types. */
enum {
    CT_STOP = 0,
    CT_TRUE = 1,
    CT_FALSE = 2,
    CT_BYTE = 3,
    CT_I16 = 4,
    CT_I32 = 5,
    CT_I64 = 6,
    CT_DOUBLE = 7,
    CT_BINARY = 8,
    CT_LIST = 9,
    CT_SET = 10,
    CT_MAP = 11,
    CT_STRUCT = 12
};

struct rd {
    const uint8_t *p, *end;
    int depth;
    char *err;
    size_t errlen;
};

static int rd_trunc(struct rd *r)
{
    return err_set(r->err, r->errlen, SLUICE_ERR_TRUNCATED, "Thrift data ends early");
}

static int rd_varint(struct rd *r, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p >= r->end)
            return rd_trunc(r);
        uint8_t b = *r->p++;
        if (shift == 63 && (b & 0x7e))
            return err_set(r->err, r->errlen, SLUICE_ERR_INVALID, "Thrift varint overflows");
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return err_set(r->err, r->errlen, SLUICE_ERR_INVALID, "Thrift varint too long");
}

static int rd_i64(struct rd *r, int64_t *out)
{
    uint64_t v;
    int rc = rd_varint(r, &v);
    if (rc)
        return rc;
    *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
    return 0;
}

static int rd_i32(struct rd *r, int32_t *out)
{
    int64_t v;
    int rc = rd_i64(r, &v);
    if (rc)
        return rc;
    if (v < INT32_MIN || v > INT32_MAX)
        return err_set(r->err, r->errlen, SLUICE_ERR_INVALID, "Thrift i32 out of range");
    *out = (int32_t)v;
    return 0;
}

static int rd_skip_bytes(struct rd *r, uint64_t n)
{
    if (n > (uint64_t)(r->end - r->p))
        return rd_trunc(r);
    r->p += n;
    return 0;
}

/* Reads a field header: *type is CT_STOP at the end of a struct. */
static int rd_field(struct rd *r, int16_t *last, int *type, int16_t *id)
{
    if (r->p >= r->end)
        return rd_trunc(r);
    uint8_t b = *r->p++;
    *type = b & 0x0f;
    if (*type == CT_STOP)
        return 0;
    int delta = b >> 4;
    if (delta) {
        *id = (int16_t)(*last + delta);
    } else {
        int64_t v;
        int rc = rd_i64(r, &v);
        if (rc)
            return rc;
        if (v < INT16_MIN || v > INT16_MAX)
            return err_set(r->err, r->errlen, SLUICE_ERR_INVALID, "Thrift field id out of range");
        *id = (int16_t)v;
    }
    *last = *id;
    return 0;
}

/* Reads a list or set header; the element count is bounded by the bytes left, since every
 * element takes at least one byte. */
static int rd_list(struct rd *r, int *etype, size_t *n)
{
    if (r->p >= r->end)
        return rd_trunc(r);
    uint8_t b = *r->p++;
    *etype = b & 0x0f;
    uint64_t size = b >> 4;
    if (size == 15) {
        int rc = rd_varint(r, &size);
        if (rc)
            return rc;
    }
    /* Truncated rather than invalid: the rest of the list may lie in bytes not read yet. */
    if (size > (uint64_t)(r->end - r->p))
        return err_set(r->err, r->errlen, SLUICE_ERR_TRUNCATED,
                       "Thrift list of %llu elements in %zu bytes", (unsigned long long)size,
                       (size_t)(r->end - r->p));
    *n = (size_t)size;
    return 0;
}

static int rd_skip(struct rd *r, int type, bool in_list);

static int rd_enter(struct rd *r)
{
    if (++r->depth > PQT_MAX_DEPTH)
        return err_set(r->err, r->errlen, SLUICE_ERR_INVALID, "Thrift structs nest deeper than %d",
                       PQT_MAX_DEPTH);
    return 0;
}

static int rd_skip_struct(struct rd *r)
{
    int rc = rd_enter(r);
    if (rc)
        return rc;
    int16_t last = 0, id = 0;
    for (;;) {
        int type = CT_STOP;
        if ((rc = rd_field(r, &last, &type, &id)))
            return rc;
        if (type == CT_STOP)
            break;
        if ((rc = rd_skip(r, type, false)))
            return rc;
    }
    r->depth--;
    return 0;
}

/* Skips one value of the given wire type. A bool is in its field header, but takes a byte of
 * its own inside a list. */
static int rd_skip(struct rd *r, int type, bool in_list)
{
    uint64_t v;
    int rc;
    switch (type) {
    case CT_TRUE:
    case CT_FALSE:
        return in_list ? rd_skip_bytes(r, 1) : 0;
    case CT_BYTE:
        return rd_skip_bytes(r, 1);
    case CT_I16:
    case CT_I32:
    case CT_I64:
        return rd_varint(r, &v);
    case CT_DOUBLE:
        return rd_skip_bytes(r, 8);
    case CT_BINARY:
        if ((rc = rd_varint(r, &v)))
            return rc;
        return rd_skip_bytes(r, v);
    case CT_LIST:
    case CT_SET: {
        int etype;
        size_t n;
        if ((rc = rd_list(r, &etype, &n)) || (rc = rd_enter(r)))
            return rc;
        for (size_t i = 0; i < n; i++)
            if ((rc = rd_skip(r, etype, true)))
                return rc;
        r->depth--;
        return 0;
    }
    case CT_MAP: {
        if ((rc = rd_varint(r, &v)))
            return rc;
        if (v == 0)
            return 0;
        if (v > (uint64_t)(r->end - r->p))
            return err_set(r->err, r->errlen, SLUICE_ERR_INVALID, "Thrift map too long");
        if (r->p >= r->end)
            return rd_trunc(r);
        uint8_t kv = *r->p++;
        if ((rc = rd_enter(r)))
            return rc;
        for (uint64_t i = 0; i < v; i++)
            if ((rc = rd_skip(r, kv >> 4, true)) || (rc = rd_skip(r, kv & 0x0f, true)))
                return rc;
        r->depth--;
        return 0;
    }
    case CT_STRUCT:
        return rd_skip_struct(r);
    default:
        return err_set(r->err, r->errlen, SLUICE_ERR_INVALID, "unknown Thrift type %d", type);
    }
}

/* Checks a field's (or a list's elements') Thrift type. A list's element type is checked only
 * when the list has elements: writers put 0 there for an empty list. */
static int rd_want(struct rd *r, const char *what, int type, int want)
{
    if (type == want)
        return 0;
    return err_set(r->err, r->errlen, SLUICE_ERR_INVALID, "%s has Thrift type %d, expected %d",
                   what, type, want);
}

static int rd_field_i32(struct rd *r, const char *what, int type, int32_t *out)
{
    int rc = rd_want(r, what, type, CT_I32);
    return rc ? rc : rd_i32(r, out);
}

static int rd_field_i64(struct rd *r, const char *what, int type, int64_t *out)
{
    int rc = rd_want(r, what, type, CT_I64);
    return rc ? rc : rd_i64(r, out);
}

static int rd_field_bool(struct rd *r, const char *what, int type, bool *out)
{
    if (type != CT_TRUE && type != CT_FALSE)
        return err_set(r->err, r->errlen, SLUICE_ERR_INVALID, "%s is not a Thrift bool", what);
    *out = type == CT_TRUE;
    return 0;
}

static int rd_missing(struct rd *r, const char *what)
{
    return err_set(r->err, r->errlen, SLUICE_ERR_INVALID, "%s missing", what);
}

/* A struct's fields, one at a time: FIELDS_BEGIN(r, rc) (a body on type and id, setting rc)
 * FIELDS_END(r, rc). */
#define FIELDS_BEGIN(r, rc)                                                                        \
    int16_t last_ = 0, id = 0;                                                                     \
    int type = CT_STOP;                                                                            \
    if ((rc = rd_enter(r)))                                                                        \
        return rc;                                                                                 \
    for (;;) {                                                                                     \
        if ((rc = rd_field(r, &last_, &type, &id)))                                                \
            return rc;                                                                             \
        if (type == CT_STOP)                                                                       \
            break;
#define FIELDS_END(r, rc)                                                                          \
    if (rc)                                                                                        \
        return rc;                                                                                 \
    }                                                                                              \
    r->depth--;

static int read_int_type(struct rd *r, struct pqt_schema *s)
{
    int rc = 0;
    FIELDS_BEGIN(r, rc)
    if (id == 1 && type == CT_BYTE) {
        if (r->p >= r->end)
            return rd_trunc(r);
        s->int_bits = (int8_t)*r->p++;
    } else if (id == 2) {
        rc = rd_field_bool(r, "IntType.isSigned", type, &s->int_signed);
    } else {
        rc = rd_skip(r, type, false);
    }
    FIELDS_END(r, rc)
    return 0;
}

static int read_logical(struct rd *r, struct pqt_schema *s)
{
    int rc = 0;
    FIELDS_BEGIN(r, rc)
    if (type == CT_STRUCT && s->logical == PQT_LT_NONE) {
        s->logical = id;
        rc = id == PQT_LT_INTEGER ? read_int_type(r, s) : rd_skip(r, type, false);
    } else {
        rc = rd_skip(r, type, false);
    }
    FIELDS_END(r, rc)
    return 0;
}

static int read_string(struct rd *r, const char *what, int type, char **out)
{
    uint64_t n;
    int rc = rd_want(r, what, type, CT_BINARY);
    if (rc || (rc = rd_varint(r, &n)))
        return rc;
    if (n > (uint64_t)(r->end - r->p))
        return rd_trunc(r);
    char *s = malloc((size_t)n + 1);
    if (!s)
        return err_set(r->err, r->errlen, SLUICE_ERR_NOMEM, "out of memory");
    memcpy(s, r->p, (size_t)n);
    s[n] = 0;
    r->p += n;
    free(*out);
    *out = s;
    return 0;
}

static int read_schema(struct rd *r, struct pqt_schema *s)
{
    int rc = 0;
    s->type = s->repetition = s->converted = -1;
    FIELDS_BEGIN(r, rc)
    switch (id) {
    case 1:
        rc = rd_field_i32(r, "SchemaElement.type", type, &s->type);
        break;
    case 2:
        rc = rd_field_i32(r, "SchemaElement.type_length", type, &s->type_length);
        break;
    case 3:
        rc = rd_field_i32(r, "SchemaElement.repetition_type", type, &s->repetition);
        break;
    case 4:
        rc = read_string(r, "SchemaElement.name", type, &s->name);
        break;
    case 5:
        rc = rd_field_i32(r, "SchemaElement.num_children", type, &s->num_children);
        break;
    case 6:
        rc = rd_field_i32(r, "SchemaElement.converted_type", type, &s->converted);
        break;
    case 7:
        rc = rd_field_i32(r, "SchemaElement.scale", type, &s->scale);
        break;
    case 8:
        rc = rd_field_i32(r, "SchemaElement.precision", type, &s->precision);
        break;
    case 10:
        rc = rd_want(r, "SchemaElement.logicalType", type, CT_STRUCT);
        if (!rc)
            rc = read_logical(r, s);
        break;
    default:
        rc = rd_skip(r, type, false);
    }
    FIELDS_END(r, rc)
    if (!s->name)
        return rd_missing(r, "SchemaElement.name");
    return 0;
}

static int read_column_meta(struct rd *r, struct pqt_chunk *c)
{
    int rc = 0;
    unsigned seen = 0;
    FIELDS_BEGIN(r, rc)
    switch (id) {
    case 1:
        rc = rd_field_i32(r, "ColumnMetaData.type", type, &c->type);
        seen |= 1;
        break;
    case 4:
        rc = rd_field_i32(r, "ColumnMetaData.codec", type, &c->codec);
        seen |= 2;
        break;
    case 5:
        rc = rd_field_i64(r, "ColumnMetaData.num_values", type, &c->num_values);
        seen |= 4;
        break;
    case 6:
        rc = rd_field_i64(r, "ColumnMetaData.total_uncompressed_size", type,
                          &c->total_uncompressed_size);
        break;
    case 7:
        rc = rd_field_i64(r, "ColumnMetaData.total_compressed_size", type,
                          &c->total_compressed_size);
        seen |= 8;
        break;
    case 9:
        rc = rd_field_i64(r, "ColumnMetaData.data_page_offset", type, &c->data_page_offset);
        seen |= 16;
        break;
    case 11:
        rc = rd_field_i64(r, "ColumnMetaData.dictionary_page_offset", type,
                          &c->dictionary_page_offset);
        break;
    default:
        rc = rd_skip(r, type, false);
    }
    FIELDS_END(r, rc)
    static const char *const names[] = {"type", "codec", "num_values", "total_compressed_size",
                                        "data_page_offset"};
    for (int i = 0; i < 5; i++)
        if (!(seen & (1u << i)))
            return err_set(r->err, r->errlen, SLUICE_ERR_INVALID, "ColumnMetaData.%s missing",
                           names[i]);
    c->has_meta = true;
    return 0;
}

static int read_chunk(struct rd *r, struct pqt_chunk *c)
{
    int rc = 0;
    c->dictionary_page_offset = -1;
    FIELDS_BEGIN(r, rc)
    if (id == 1 && type == CT_BINARY) {
        c->has_file_path = true;
        rc = rd_skip(r, type, false);
    } else if (id == 3) {
        rc = rd_want(r, "ColumnChunk.meta_data", type, CT_STRUCT);
        if (!rc)
            rc = read_column_meta(r, c);
    } else {
        rc = rd_skip(r, type, false);
    }
    FIELDS_END(r, rc)
    return 0;
}

static int read_row_group(struct rd *r, struct pqt_row_group *g)
{
    int rc = 0;
    bool have_rows = false, have_cols = false;
    FIELDS_BEGIN(r, rc)
    if (id == 1) {
        int et;
        size_t n;
        if ((rc = rd_want(r, "RowGroup.columns", type, CT_LIST)) || (rc = rd_list(r, &et, &n)) ||
            (n > 0 && (rc = rd_want(r, "RowGroup.columns[]", et, CT_STRUCT))))
            return rc;
        if (have_cols)
            return err_set(r->err, r->errlen, SLUICE_ERR_INVALID, "RowGroup.columns twice");
        have_cols = true;
        g->columns = calloc(n ? n : 1, sizeof(*g->columns));
        if (!g->columns)
            return err_set(r->err, r->errlen, SLUICE_ERR_NOMEM, "out of memory");
        g->num_columns = n;
        for (size_t i = 0; i < n && !rc; i++)
            rc = read_chunk(r, &g->columns[i]);
    } else if (id == 3) {
        rc = rd_field_i64(r, "RowGroup.num_rows", type, &g->num_rows);
        have_rows = true;
    } else {
        rc = rd_skip(r, type, false);
    }
    FIELDS_END(r, rc)
    if (!have_cols)
        return rd_missing(r, "RowGroup.columns");
    if (!have_rows)
        return rd_missing(r, "RowGroup.num_rows");
    return 0;
}

static int read_file_meta(struct rd *r, struct pqt_file_meta *m)
{
    int rc = 0;
    bool have_rows = false, have_schema = false, have_groups = false;
    FIELDS_BEGIN(r, rc)
    int et;
    size_t n;
    switch (id) {
    case 2:
        if ((rc = rd_want(r, "FileMetaData.schema", type, CT_LIST)) || (rc = rd_list(r, &et, &n)) ||
            (n > 0 && (rc = rd_want(r, "FileMetaData.schema[]", et, CT_STRUCT))))
            return rc;
        if (have_schema)
            return err_set(r->err, r->errlen, SLUICE_ERR_INVALID, "FileMetaData.schema twice");
        have_schema = true;
        m->schema = calloc(n ? n : 1, sizeof(*m->schema));
        if (!m->schema)
            return err_set(r->err, r->errlen, SLUICE_ERR_NOMEM, "out of memory");
        m->num_schema = n;
        for (size_t i = 0; i < n && !rc; i++)
            rc = read_schema(r, &m->schema[i]);
        break;
    case 3:
        rc = rd_field_i64(r, "FileMetaData.num_rows", type, &m->num_rows);
        have_rows = true;
        break;
    case 4:
        if ((rc = rd_want(r, "FileMetaData.row_groups", type, CT_LIST)) ||
            (rc = rd_list(r, &et, &n)) ||
            (n > 0 && (rc = rd_want(r, "FileMetaData.row_groups[]", et, CT_STRUCT))))
            return rc;
        if (have_groups)
            return err_set(r->err, r->errlen, SLUICE_ERR_INVALID, "FileMetaData.row_groups twice");
        have_groups = true;
        m->row_groups = calloc(n ? n : 1, sizeof(*m->row_groups));
        if (!m->row_groups)
            return err_set(r->err, r->errlen, SLUICE_ERR_NOMEM, "out of memory");
        m->num_row_groups = n;
        for (size_t i = 0; i < n && !rc; i++)
            rc = read_row_group(r, &m->row_groups[i]);
        break;
    case 8:
        m->encrypted = true;
        rc = rd_skip(r, type, false);
        break;
    default:
        rc = rd_skip(r, type, false);
    }
    FIELDS_END(r, rc)
    if (!have_schema)
        return rd_missing(r, "FileMetaData.schema");
    if (!have_rows)
        return rd_missing(r, "FileMetaData.num_rows");
    if (!have_groups)
        return rd_missing(r, "FileMetaData.row_groups");
    return 0;
}

int pqt_read_file_meta(const uint8_t *p, size_t len, struct pqt_file_meta *m, char *err,
                       size_t errlen)
{
    struct rd r = {p, p + len, 0, err, errlen};
    memset(m, 0, sizeof(*m));
    int rc = read_file_meta(&r, m);
    if (rc)
        pqt_file_meta_free(m);
    return rc;
}

void pqt_file_meta_free(struct pqt_file_meta *m)
{
    if (m->schema)
        for (size_t i = 0; i < m->num_schema; i++)
            free(m->schema[i].name);
    free(m->schema);
    if (m->row_groups)
        for (size_t i = 0; i < m->num_row_groups; i++)
            free(m->row_groups[i].columns);
    free(m->row_groups);
    memset(m, 0, sizeof(*m));
}

static int read_data_page(struct rd *r, struct pqt_page_header *h)
{
    int rc = 0;
    unsigned seen = 0;
    FIELDS_BEGIN(r, rc)
    switch (id) {
    case 1:
        rc = rd_field_i32(r, "DataPageHeader.num_values", type, &h->num_values);
        seen |= 1;
        break;
    case 2:
        rc = rd_field_i32(r, "DataPageHeader.encoding", type, &h->encoding);
        seen |= 2;
        break;
    case 3:
        rc = rd_field_i32(r, "DataPageHeader.definition_level_encoding", type, &h->def_encoding);
        seen |= 4;
        break;
    case 4:
        rc = rd_field_i32(r, "DataPageHeader.repetition_level_encoding", type, &h->rep_encoding);
        seen |= 8;
        break;
    default:
        rc = rd_skip(r, type, false);
    }
    FIELDS_END(r, rc)
    if (seen != 15)
        return rd_missing(r, "a field of DataPageHeader");
    h->has_data = true;
    return 0;
}

static int read_data_page_v2(struct rd *r, struct pqt_page_header *h)
{
    int rc = 0;
    unsigned seen = 0;
    h->is_compressed = true;
    FIELDS_BEGIN(r, rc)
    switch (id) {
    case 1:
        rc = rd_field_i32(r, "DataPageHeaderV2.num_values", type, &h->num_values);
        seen |= 1;
        break;
    case 2:
        rc = rd_field_i32(r, "DataPageHeaderV2.num_nulls", type, &h->num_nulls);
        seen |= 2;
        break;
    case 3:
        rc = rd_field_i32(r, "DataPageHeaderV2.num_rows", type, &h->num_rows);
        seen |= 4;
        break;
    case 4:
        rc = rd_field_i32(r, "DataPageHeaderV2.encoding", type, &h->encoding);
        seen |= 8;
        break;
    case 5:
        rc = rd_field_i32(r, "DataPageHeaderV2.definition_levels_byte_length", type, &h->def_bytes);
        seen |= 16;
        break;
    case 6:
        rc = rd_field_i32(r, "DataPageHeaderV2.repetition_levels_byte_length", type, &h->rep_bytes);
        seen |= 32;
        break;
    case 7:
        rc = rd_field_bool(r, "DataPageHeaderV2.is_compressed", type, &h->is_compressed);
        break;
    default:
        rc = rd_skip(r, type, false);
    }
    FIELDS_END(r, rc)
    if (seen != 63)
        return rd_missing(r, "a field of DataPageHeaderV2");
    h->has_data_v2 = true;
    return 0;
}

static int read_dict_page(struct rd *r, struct pqt_page_header *h)
{
    int rc = 0;
    unsigned seen = 0;
    FIELDS_BEGIN(r, rc)
    switch (id) {
    case 1:
        rc = rd_field_i32(r, "DictionaryPageHeader.num_values", type, &h->num_values);
        seen |= 1;
        break;
    case 2:
        rc = rd_field_i32(r, "DictionaryPageHeader.encoding", type, &h->encoding);
        seen |= 2;
        break;
    default:
        rc = rd_skip(r, type, false);
    }
    FIELDS_END(r, rc)
    if (seen != 3)
        return rd_missing(r, "a field of DictionaryPageHeader");
    h->has_dict = true;
    return 0;
}

static int read_page_header(struct rd *r, struct pqt_page_header *h)
{
    int rc = 0;
    unsigned seen = 0;
    FIELDS_BEGIN(r, rc)
    switch (id) {
    case 1:
        rc = rd_field_i32(r, "PageHeader.type", type, &h->type);
        seen |= 1;
        break;
    case 2:
        rc = rd_field_i32(r, "PageHeader.uncompressed_page_size", type, &h->uncompressed_size);
        seen |= 2;
        break;
    case 3:
        rc = rd_field_i32(r, "PageHeader.compressed_page_size", type, &h->compressed_size);
        seen |= 4;
        break;
    case 4: {
        int32_t crc;
        rc = rd_field_i32(r, "PageHeader.crc", type, &crc);
        h->crc = (uint32_t)crc;
        h->has_crc = true;
        break;
    }
    case 5:
        rc = rd_want(r, "PageHeader.data_page_header", type, CT_STRUCT);
        if (!rc)
            rc = read_data_page(r, h);
        break;
    case 7:
        rc = rd_want(r, "PageHeader.dictionary_page_header", type, CT_STRUCT);
        if (!rc)
            rc = read_dict_page(r, h);
        break;
    case 8:
        rc = rd_want(r, "PageHeader.data_page_header_v2", type, CT_STRUCT);
        if (!rc)
            rc = read_data_page_v2(r, h);
        break;
    default:
        rc = rd_skip(r, type, false);
    }
    FIELDS_END(r, rc)
    if (seen != 7)
        return rd_missing(r, "a field of PageHeader");
    return 0;
}

int pqt_read_page_header(const uint8_t *p, size_t len, struct pqt_page_header *h, size_t *used,
                         char *err, size_t errlen)
{
    struct rd r = {p, p + len, 0, err, errlen};
    memset(h, 0, sizeof(*h));
    int rc = read_page_header(&r, h);
    if (rc)
        return rc;
    *used = (size_t)(r.p - p);
    return 0;
}
