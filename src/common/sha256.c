/* SHA-256 by OpenSSL's libcrypto (a pure computation: no I/O, no clock), so the digests are
 * those of a well-kept implementation rather than one of our own. */
#include "sha256.h"

#include <openssl/sha.h>

void sha256(const void *data, size_t len, uint8_t out[SHA256_LEN])
{
    SHA256(data, len, out);
}

void sha256_hex(const void *data, size_t len, char out[SHA256_HEX_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    uint8_t d[SHA256_LEN];
    sha256(data, len, d);
    for (size_t i = 0; i < SHA256_LEN; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[SHA256_HEX_LEN] = '\0';
}
