/* SHA-256 (FIPS 180-4), for digests a peer must not be able to collide (the status document's
 * pipeline digests). Pure computation (OpenSSL's libcrypto underneath), so the dispatcher core
 * can use it. */
#ifndef SLUICE_COMMON_SHA256_H
#define SLUICE_COMMON_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN 32
#define SHA256_HEX_LEN (2 * SHA256_LEN)

/* The digest of data[0..len) into out. */
void sha256(const void *data, size_t len, uint8_t out[SHA256_LEN]);

/* The same as lowercase hex into out (SHA256_HEX_LEN characters and a NUL). */
void sha256_hex(const void *data, size_t len, char out[SHA256_HEX_LEN + 1]);

#endif
