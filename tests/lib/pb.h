/* A protobuf writer for tests that build records byte by byte (tf.train.Example and its parts)
 * rather than through a generated encoder, so that what is written is exactly what the test
 * says. Every writer fails the test when the message outgrows its buffer. */
#ifndef SLUICE_TESTS_LIB_PB_H
#define SLUICE_TESTS_LIB_PB_H

#include <stddef.h>
#include <stdint.h>

/* A message being written: its bytes p[0, n). Start from {0}. */
struct pb {
    uint8_t p[8192];
    size_t n;
};

/* Appends d[0, n) as it is. */
void pb_raw(struct pb *b, const void *d, size_t n);

/* Appends v as a base-128 varint. */
void pb_varint(struct pb *b, uint64_t v);

/* Appends the key of field with wire_type (0 varint, 1 64-bit, 2 length-delimited, 5 32-bit). */
void pb_tag(struct pb *b, unsigned field, unsigned wire_type);

/* Appends a length-delimited field holding d[0, n). */
void pb_len(struct pb *b, unsigned field, const void *d, size_t n);

/* Appends message m as field. */
void pb_msg(struct pb *b, unsigned field, const struct pb *m);

/* Appends f as 4 little-endian bytes (a fixed32 or a packed float's element). */
void pb_f32(struct pb *b, float f);

/* Appends to a tf.train.Features message the map entry key -> feature (a Feature message). */
void pb_entry(struct pb *features, const char *key, const struct pb *feature);

#endif
