/* CRC32C (Castagnoli), as used by TFRecord framing and journal records. Pure; any thread. */
#ifndef SLUICE_COMMON_CRC32C_H
#define SLUICE_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc (0 to start) over len bytes: crc32c(crc32c(0, a), b) == crc32c(0, a || b). */
uint32_t crc32c_extend(uint32_t crc, const void *data, size_t len);

/* The portable table-driven path, with the same contract as crc32c_extend(). crc32c_extend()
 * uses the SSE4.2 instruction when the CPU has it and this otherwise; exposed so tests can check
 * that both paths agree. */
uint32_t crc32c_extend_sw(uint32_t crc, const void *data, size_t len);

static inline uint32_t crc32c(const void *data, size_t len)
{
    return crc32c_extend(0, data, len);
}

#endif
