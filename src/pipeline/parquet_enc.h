/* Parquet's page encodings (the Parquet format's Encodings.md), pure: byte arrays in, values out.
 *
 * Each decoder is a small state over a borrowed byte range that hands out values in batches of
 * at most PQ_BATCH, so a caller holds a page's bytes and a batch, never a page's worth of
 * decoded values: a run-length encoding can claim millions of values in a few bytes, and those
 * only ever exist a batch at a time. Every read is checked against the range; running out is
 * SLUICE_ERR_INVALID with a one-line message in err.
 *
 * Values come out converted to their sluice dtype (struct pq_conv): fixed-width values packed
 * native-endian in the dtype's size, byte strings as struct pq_ref pointing into the page, the
 * dictionary, or the decoder's own buffer (valid until the next call on the decoder). */
#ifndef SLUICE_PIPELINE_PARQUET_ENC_H
#define SLUICE_PIPELINE_PARQUET_ENC_H

#include "sluice/sluice.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PQ_BATCH 1024

/* A byte string: len bytes at p. */
struct pq_ref {
    const uint8_t *p;
    size_t len;
};

/* How a column's physical values become sluice values. */
struct pq_conv {
    int phys;  /* enum pqt_type */
    int width; /* FIXED_LEN_BYTE_ARRAY: type_length */
    enum sluice_dtype dtype;
    bool f16; /* FIXED_LEN_BYTE_ARRAY(2) holding IEEE halves: dtype float32 */
};

/* IEEE 754 half to single precision, exactly (subnormals, infinities, NaN payloads). */
float pq_half_to_float(uint16_t h);

/* The RLE / bit-packed hybrid (levels, dictionary indices, RLE booleans), without a length
 * prefix: the caller strips it. Values are bit_width (0..32) bits wide. */
struct pq_rle {
    const uint8_t *p, *end;
    int bw;
    uint64_t left;       /* values left in the current run */
    bool packed;         /* the current run is bit-packed */
    uint32_t value;      /* an RLE run's value */
    const uint8_t *bits; /* a bit-packed run's bytes */
    size_t nbits_bytes;  /* ... and how many of them are there */
    uint64_t bitpos;     /* the next value's bit offset in bits */
};

/* Returns 0, or SLUICE_ERR_INVALID for a bit width over 32. */
int pq_rle_init(struct pq_rle *r, const uint8_t *p, size_t len, int bit_width, char *err,
                size_t errlen);
/* Decodes the next n values into out. Returns 0, or SLUICE_ERR_INVALID when the data ends
 * first. */
int pq_rle_get(struct pq_rle *r, uint32_t *out, size_t n, char *err, size_t errlen);

/* DELTA_BINARY_PACKED: 64-bit arithmetic wrapping as the writer's did (callers of 32-bit columns
 * truncate). */
struct pq_delta {
    const uint8_t *p, *end;
    uint64_t total, done; /* values in the stream, values handed out */
    uint64_t mb_count, mb_size;
    int64_t last, min_delta;
    const uint8_t *widths; /* the current block's bit widths, mb_count bytes */
    uint64_t mb;           /* index of the next miniblock in the block */
    uint64_t mb_left;      /* values left in the current miniblock */
    const uint8_t *bits;
    size_t nbits_bytes;
    uint64_t bitpos;
    int bw;
    int max_bw; /* 32 or 64 */
};

/* Reads the stream's header. max_bits is 32 for INT32 and lengths, 64 for INT64. Returns 0 or
 * SLUICE_ERR_INVALID. */
int pq_delta_init(struct pq_delta *d, const uint8_t *p, size_t len, int max_bits, char *err,
                  size_t errlen);
/* Decodes the next n values (n <= total - done). Returns 0 or SLUICE_ERR_INVALID. */
int pq_delta_get(struct pq_delta *d, int64_t *out, size_t n, char *err, size_t errlen);
/* The length of the whole stream at p (header, blocks, padding), walking its blocks without
 * decoding their values: where what follows it starts. Returns 0 or SLUICE_ERR_INVALID. */
int pq_delta_size(const uint8_t *p, size_t len, size_t *size, char *err, size_t errlen);

/* A page's values, of one encoding. */
struct pq_values {
    int encoding; /* enum pqt_encoding */
    struct pq_conv conv;
    size_t vsize; /* bytes per output value (0 for bytes) */
    const uint8_t *p, *end;
    uint64_t bitpos;   /* PLAIN booleans */
    struct pq_rle rle; /* dictionary indices, RLE booleans */
    const void *dict;  /* dictionary: dict_n values, packed (vsize each) or struct pq_ref */
    size_t dict_n;
    struct pq_delta d1, d2; /* DELTA_*: the lengths (prefix lengths), suffix lengths */
    const uint8_t *data;    /* DELTA_LENGTH_BYTE_ARRAY, DELTA_BYTE_ARRAY: the next string */
    uint64_t bss_n, bss_i;  /* BYTE_STREAM_SPLIT: values in the page, next value */
    /* Owned buffers, kept across pages (pq_values_free releases them). */
    uint8_t *prev; /* DELTA_BYTE_ARRAY: the previous value */
    size_t prev_len, prev_cap;
    uint8_t *arena; /* strings built by DELTA_BYTE_ARRAY and BYTE_STREAM_SPLIT */
    size_t arena_cap;
    uint32_t idx[PQ_BATCH];
    int64_t tmp[PQ_BATCH], tmp2[PQ_BATCH];
    size_t tpos, tcnt; /* DELTA_BYTE_ARRAY: lengths in tmp, tmp2 decoded, not used yet */
};

/* The largest count of PLAIN values of conv's physical type that len bytes can hold: what bounds
 * a dictionary's allocation. */
uint64_t pq_plain_max(const struct pq_conv *conv, size_t len);

/* Starts decoding a page's values: len bytes at p (borrowed until the next pq_values_init), in
 * the given encoding. dict/dict_n: the column's dictionary in output form, for the dictionary
 * encodings (NULL when there is none: an error for those). Keeps v's owned buffers. Returns 0,
 * SLUICE_ERR_INVALID (an encoding the type cannot have, a malformed header) or
 * SLUICE_ERR_UNSUPPORTED. */
int pq_values_init(struct pq_values *v, int encoding, const struct pq_conv *conv, const uint8_t *p,
                   size_t len, const void *dict, size_t dict_n, char *err, size_t errlen);
/* Decodes up to n (<= PQ_BATCH) values: fixed-width ones into out (n * vsize bytes), byte
 * strings into refs. *got receives how many, at least one when n > 0 (fewer than n only for
 * strings a decoder builds itself, to bound its buffer). Returns 0, SLUICE_ERR_INVALID (the
 * page ends first, a dictionary index out of range, a negative length) or SLUICE_ERR_NOMEM. */
int pq_values_get(struct pq_values *v, size_t n, void *out, struct pq_ref *refs, size_t *got,
                  char *err, size_t errlen);
void pq_values_free(struct pq_values *v);

#endif
