#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/pb.h"

#include <string.h>

void pb_raw(struct pb *b, const void *d, size_t n)
{
    assert_true(b->n + n <= sizeof(b->p));
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

void pb_varint(struct pb *b, uint64_t v)
{
    do {
        uint8_t byte = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            byte |= 0x80;
        pb_raw(b, &byte, 1);
    } while (v);
}

void pb_tag(struct pb *b, unsigned field, unsigned wire_type)
{
    pb_varint(b, (uint64_t)field << 3 | wire_type);
}

void pb_len(struct pb *b, unsigned field, const void *d, size_t n)
{
    pb_tag(b, field, 2);
    pb_varint(b, n);
    pb_raw(b, d, n);
}

void pb_msg(struct pb *b, unsigned field, const struct pb *m)
{
    pb_len(b, field, m->p, m->n);
}

void pb_f32(struct pb *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint8_t le[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
    pb_raw(b, le, 4);
}

void pb_entry(struct pb *features, const char *key, const struct pb *feature)
{
    struct pb e = {0};
    pb_len(&e, 1, key, strlen(key));
    pb_msg(&e, 2, feature);
    pb_msg(features, 1, &e);
}
