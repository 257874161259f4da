#include "record.h"

#include "common/crc32c.h"
#include "common/error.h"

#include <string.h>

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static uint32_t checksum(const void *key, size_t klen, uint8_t format, const void *payload,
                         size_t len)
{
    uint32_t crc = crc32c_extend(0, key, klen);
    crc = crc32c_extend(crc, &format, 1);
    return len ? crc32c_extend(crc, payload, len) : crc;
}

void journal_record_seal(uint8_t *out, const void *key, size_t klen, size_t len)
{
    out[4] = JOURNAL_RECORD_FORMAT;
    put_be32(out, checksum(key, klen, JOURNAL_RECORD_FORMAT, out + JOURNAL_RECORD_HEADER, len));
}

void journal_record_frame(uint8_t *out, const void *key, size_t klen, const void *payload,
                          size_t len)
{
    if (len)
        memmove(out + JOURNAL_RECORD_HEADER, payload, len);
    journal_record_seal(out, key, klen, len);
}

int journal_record_decode(const uint8_t *value, size_t vlen, const void *key, size_t klen,
                          const uint8_t **payload, size_t *len, const char **why)
{
    const char *unused;
    if (!why)
        why = &unused;
    if (vlen < JOURNAL_RECORD_HEADER) {
        *why = "shorter than its header";
        return SLUICE_ERR_TRUNCATED;
    }
    if (value[4] != JOURNAL_RECORD_FORMAT) {
        *why = "unknown record format";
        return SLUICE_ERR_CORRUPT;
    }
    const uint8_t *p = value + JOURNAL_RECORD_HEADER;
    size_t n = vlen - JOURNAL_RECORD_HEADER;
    if (get_be32(value) != checksum(key, klen, value[4], p, n)) {
        *why = "checksum mismatch";
        return SLUICE_ERR_CORRUPT;
    }
    *payload = p;
    *len = n;
    *why = NULL;
    return 0;
}

void journal_seq_key(uint64_t seq, uint8_t out[8])
{
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(seq >> (56 - 8 * i));
}

uint64_t journal_seq_from_key(const uint8_t key[8])
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | key[i];
    return v;
}
