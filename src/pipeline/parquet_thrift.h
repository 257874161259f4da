/* The Thrift compact protocol structures of a Parquet file (parquet.thrift): the footer's
 * FileMetaData with its schema, row groups and column chunks, and a page's PageHeader. Pure: it
 * decodes a byte array into plain structs and nothing else.
 *
 * Every read is bounded by the bytes given: a varint, a string or a list that runs past the end
 * is an error (SLUICE_ERR_TRUNCATED, so a caller reading a page header in pieces can read more
 * and retry), a list claims no more elements than the bytes left could hold, and structs nest
 * at most PQT_MAX_DEPTH deep. Fields this reader does not know are skipped by their wire type,
 * whatever it is. Fields a Parquet file must have are checked; a missing one is
 * SLUICE_ERR_INVALID with a message naming it. */
#ifndef SLUICE_PIPELINE_PARQUET_THRIFT_H
#define SLUICE_PIPELINE_PARQUET_THRIFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PQT_MAX_DEPTH 32

/* parquet.thrift's enums, as the file stores them. */
enum pqt_type {
    PQT_BOOLEAN = 0,
    PQT_INT32 = 1,
    PQT_INT64 = 2,
    PQT_INT96 = 3,
    PQT_FLOAT = 4,
    PQT_DOUBLE = 5,
    PQT_BYTE_ARRAY = 6,
    PQT_FIXED_LEN_BYTE_ARRAY = 7
};

enum pqt_repetition { PQT_REQUIRED = 0, PQT_OPTIONAL = 1, PQT_REPEATED = 2 };

enum pqt_converted {
    PQT_CT_UTF8 = 0,
    PQT_CT_MAP = 1,
    PQT_CT_MAP_KEY_VALUE = 2,
    PQT_CT_LIST = 3,
    PQT_CT_ENUM = 4,
    PQT_CT_DECIMAL = 5,
    PQT_CT_DATE = 6,
    PQT_CT_TIME_MILLIS = 7,
    PQT_CT_TIME_MICROS = 8,
    PQT_CT_TIMESTAMP_MILLIS = 9,
    PQT_CT_TIMESTAMP_MICROS = 10,
    PQT_CT_UINT_8 = 11,
    PQT_CT_UINT_16 = 12,
    PQT_CT_UINT_32 = 13,
    PQT_CT_UINT_64 = 14,
    PQT_CT_INT_8 = 15,
    PQT_CT_INT_16 = 16,
    PQT_CT_INT_32 = 17,
    PQT_CT_INT_64 = 18,
    PQT_CT_JSON = 19,
    PQT_CT_BSON = 20,
    PQT_CT_INTERVAL = 21
};

/* The member of the LogicalType union that is set: its field id. */
enum pqt_logical {
    PQT_LT_NONE = 0,
    PQT_LT_STRING = 1,
    PQT_LT_MAP = 2,
    PQT_LT_LIST = 3,
    PQT_LT_ENUM = 4,
    PQT_LT_DECIMAL = 5,
    PQT_LT_DATE = 6,
    PQT_LT_TIME = 7,
    PQT_LT_TIMESTAMP = 8,
    PQT_LT_INTEGER = 10,
    PQT_LT_UNKNOWN = 11,
    PQT_LT_JSON = 12,
    PQT_LT_BSON = 13,
    PQT_LT_UUID = 14,
    PQT_LT_FLOAT16 = 15
};

enum pqt_codec {
    PQT_UNCOMPRESSED = 0,
    PQT_SNAPPY = 1,
    PQT_GZIP = 2,
    PQT_LZO = 3,
    PQT_BROTLI = 4,
    PQT_LZ4 = 5,
    PQT_ZSTD = 6,
    PQT_LZ4_RAW = 7
};

enum pqt_encoding {
    PQT_PLAIN = 0,
    PQT_PLAIN_DICTIONARY = 2,
    PQT_RLE = 3,
    PQT_BIT_PACKED = 4,
    PQT_DELTA_BINARY_PACKED = 5,
    PQT_DELTA_LENGTH_BYTE_ARRAY = 6,
    PQT_DELTA_BYTE_ARRAY = 7,
    PQT_RLE_DICTIONARY = 8,
    PQT_BYTE_STREAM_SPLIT = 9
};

enum pqt_page_type {
    PQT_DATA_PAGE = 0,
    PQT_INDEX_PAGE = 1,
    PQT_DICTIONARY_PAGE = 2,
    PQT_DATA_PAGE_V2 = 3
};

/* A SchemaElement. Optional fields absent from the file read as -1 (type, repetition,
 * converted) or 0 (the others). */
struct pqt_schema {
    char *name; /* NUL-terminated, owned by the pqt_file_meta */
    int32_t type;
    int32_t type_length;
    int32_t repetition;
    int32_t num_children;
    int32_t converted;
    int32_t scale, precision;
    int32_t logical;  /* enum pqt_logical */
    int32_t int_bits; /* PQT_LT_INTEGER: bitWidth */
    bool int_signed;  /* PQT_LT_INTEGER: isSigned */
};

/* A ColumnChunk with its ColumnMetaData. */
struct pqt_chunk {
    bool has_file_path; /* the chunk lives in another file */
    bool has_meta;      /* meta_data was present */
    int32_t type;
    int32_t codec;
    int64_t num_values;
    int64_t total_uncompressed_size;
    int64_t total_compressed_size;
    int64_t data_page_offset;
    int64_t dictionary_page_offset; /* -1: absent */
};

struct pqt_row_group {
    struct pqt_chunk *columns;
    size_t num_columns;
    int64_t num_rows;
};

struct pqt_file_meta {
    struct pqt_schema *schema;
    size_t num_schema;
    int64_t num_rows;
    struct pqt_row_group *row_groups;
    size_t num_row_groups;
    bool encrypted; /* encryption_algorithm was present */
};

struct pqt_page_header {
    int32_t type;
    int32_t uncompressed_size;
    int32_t compressed_size;
    bool has_crc;
    uint32_t crc;
    /* DATA_PAGE, DATA_PAGE_V2 and DICTIONARY_PAGE: whichever the type says was present. */
    bool has_data, has_data_v2, has_dict;
    int32_t num_values;
    int32_t encoding;
    int32_t def_encoding, rep_encoding; /* DATA_PAGE */
    int32_t num_nulls, num_rows;        /* DATA_PAGE_V2 */
    int32_t def_bytes, rep_bytes;       /* DATA_PAGE_V2 */
    bool is_compressed;                 /* DATA_PAGE_V2; true when absent */
};

/* Decodes a FileMetaData from len bytes at p into *m (zeroed first; on failure whatever it holds
 * is freed). Returns 0, SLUICE_ERR_INVALID or SLUICE_ERR_TRUNCATED (a malformed footer, err
 * says what), or SLUICE_ERR_NOMEM. */
int pqt_read_file_meta(const uint8_t *p, size_t len, struct pqt_file_meta *m, char *err,
                       size_t errlen);
void pqt_file_meta_free(struct pqt_file_meta *m);

/* Decodes a PageHeader from the first bytes of the len at p; *used receives its length. Returns
 * 0, SLUICE_ERR_TRUNCATED when the header runs past len (read more and retry), or
 * SLUICE_ERR_INVALID with err set. Never allocates. */
int pqt_read_page_header(const uint8_t *p, size_t len, struct pqt_page_header *h, size_t *used,
                         char *err, size_t errlen);

#endif
