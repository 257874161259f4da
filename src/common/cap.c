/* Capabilities (cap.h): random secrets and the client capability derived from an iteration's
 * secret with HMAC-SHA256. */
#include "cap.h"

#include <errno.h>
#include <string.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

int cap_random(uint8_t out[CAP_KEY_LEN])
{
    size_t got = 0;
    while (got < CAP_KEY_LEN) {
        ssize_t n = getrandom(out + got, CAP_KEY_LEN - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        got += (size_t)n;
    }
    return 0;
}

/* HMAC-SHA256(secret, label || be64(id)) cut to CAP_KEY_LEN bytes. label is 15 bytes; labels
 * keep the derivations of one secret apart. */
static void derive(const uint8_t secret[CAP_KEY_LEN], const char label[15], uint64_t id,
                   uint8_t out[CAP_KEY_LEN])
{
    uint8_t msg[15 + 8];
    memcpy(msg, label, 15);
    for (int i = 0; i < 8; i++)
        msg[15 + i] = (uint8_t)(id >> (56 - 8 * i));
    uint8_t mac[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    HMAC(EVP_sha256(), secret, CAP_KEY_LEN, msg, sizeof msg, mac, &len);
    memcpy(out, mac, CAP_KEY_LEN);
    OPENSSL_cleanse(mac, sizeof mac);
}

void cap_client_key(const uint8_t secret[CAP_KEY_LEN], uint64_t client_id, uint8_t out[CAP_KEY_LEN])
{
    derive(secret, "sluice client: ", client_id, out);
}

void cap_task_key(const uint8_t iteration_key[CAP_KEY_LEN], uint64_t task_id,
                  uint8_t out[CAP_KEY_LEN])
{
    derive(iteration_key, "sluice task:   ", task_id, out);
}

bool cap_client_ok(const uint8_t secret[CAP_KEY_LEN], uint64_t client_id, const uint8_t *presented,
                   size_t len)
{
    if (len != CAP_KEY_LEN || !presented)
        return false;
    uint8_t want[CAP_KEY_LEN];
    cap_client_key(secret, client_id, want);
    bool ok = CRYPTO_memcmp(want, presented, CAP_KEY_LEN) == 0;
    OPENSSL_cleanse(want, sizeof want);
    return ok;
}
