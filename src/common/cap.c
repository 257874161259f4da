/* Capabilities (cap.h): random secrets and the client capability derived from an iteration's
 * secret with HMAC-SHA256. */
#include "cap.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
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

/* One HMAC-SHA256 context per thread, its digest set once and only its key changed per
 * derivation: the one-shot HMAC() looks the MAC and the digest up in OpenSSL's provider tables
 * (under a lock) on every call, three times the cost of a derivation, and a shared job's first
 * heartbeats derive one capability per client and task. Freed when its thread exits. */
static pthread_once_t mac_once = PTHREAD_ONCE_INIT;
static pthread_key_t mac_key;
static bool mac_key_ok;

static void mac_ctx_free(void *ctx)
{
    EVP_MAC_CTX_free(ctx);
}

static void mac_init(void)
{
    mac_key_ok = pthread_key_create(&mac_key, mac_ctx_free) == 0;
}

/* This thread's context, or NULL (out of memory: the caller falls back to HMAC()). */
static EVP_MAC_CTX *thread_mac(void)
{
    pthread_once(&mac_once, mac_init);
    if (!mac_key_ok)
        return NULL;
    EVP_MAC_CTX *ctx = pthread_getspecific(mac_key);
    if (ctx)
        return ctx;
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    EVP_MAC_free(mac); /* the context holds its own reference */
    OSSL_PARAM params[2] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end()};
    if (!ctx || !EVP_MAC_CTX_set_params(ctx, params) || pthread_setspecific(mac_key, ctx) != 0) {
        EVP_MAC_CTX_free(ctx);
        return NULL;
    }
    return ctx;
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
    size_t len = 0;
    EVP_MAC_CTX *ctx = thread_mac();
    if (!ctx || !EVP_MAC_init(ctx, secret, CAP_KEY_LEN, NULL) ||
        !EVP_MAC_update(ctx, msg, sizeof msg) || !EVP_MAC_final(ctx, mac, &len, sizeof mac)) {
        unsigned ulen = 0;
        HMAC(EVP_sha256(), secret, CAP_KEY_LEN, msg, sizeof msg, mac, &ulen);
    }
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
