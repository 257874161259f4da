/* Capabilities (src/common/cap.h): the capabilities derived from an iteration's secret (a
 * client's, a task's secret, a client's for a task) are deterministic, differ per id, per secret
 * and per kind, are accepted only whole and exact, and the random source gives distinct
 * secrets. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/cap.h"

#include <string.h>

static const uint8_t secret_a[CAP_KEY_LEN] = "iteration secret";
static const uint8_t secret_b[CAP_KEY_LEN] = "iteration secreT";

static void test_derivation(void **unused)
{
    (void)unused;
    uint8_t k7[CAP_KEY_LEN], k7again[CAP_KEY_LEN], k8[CAP_KEY_LEN], k7b[CAP_KEY_LEN];
    cap_client_key(secret_a, 7, k7);
    cap_client_key(secret_a, 7, k7again);
    cap_client_key(secret_a, 8, k8);
    cap_client_key(secret_b, 7, k7b);
    assert_memory_equal(k7, k7again, CAP_KEY_LEN);
    assert_memory_not_equal(k7, k8, CAP_KEY_LEN);
    assert_memory_not_equal(k7, k7b, CAP_KEY_LEN);
    /* The capability is not the secret itself. */
    assert_memory_not_equal(k7, secret_a, CAP_KEY_LEN);
    /* HMAC-SHA256(secret_a, "sluice client: " || be64(7)), first 16 bytes (computed with
     * `printf 'sluice client: \0\0\0\0\0\0\0\7' | openssl dgst -sha256 -hmac 'iteration secret'`).
     */
    static const uint8_t want[CAP_KEY_LEN] = {0x21, 0xba, 0x80, 0x81, 0x4d, 0xec, 0x99, 0xd1,
                                              0xb2, 0xeb, 0x25, 0x60, 0x23, 0x1e, 0x56, 0xf9};
    assert_memory_equal(k7, want, CAP_KEY_LEN);
}

/* A task's secret: another derivation of the iteration's (another label), different per task; a
 * client's capability for a task is derived from the task's secret, so it differs per task and
 * from the client's capability at the dispatcher. */
static void test_task_keys(void **unused)
{
    (void)unused;
    uint8_t t3[CAP_KEY_LEN], t4[CAP_KEY_LEN], c3[CAP_KEY_LEN], c4[CAP_KEY_LEN], c[CAP_KEY_LEN];
    cap_task_key(secret_a, 3, t3);
    cap_task_key(secret_a, 4, t4);
    cap_client_key(secret_a, 3, c);
    assert_memory_not_equal(t3, t4, CAP_KEY_LEN);
    assert_memory_not_equal(t3, c, CAP_KEY_LEN);
    /* HMAC-SHA256(secret_a, "sluice task:   " || be64(3)), first 16 bytes. */
    static const uint8_t want[CAP_KEY_LEN] = {0x8d, 0xce, 0xa5, 0xec, 0xae, 0xdc, 0x9f, 0x47,
                                              0xbf, 0xf5, 0xd1, 0x8b, 0x07, 0x15, 0x41, 0x64};
    assert_memory_equal(t3, want, CAP_KEY_LEN);
    cap_client_key(t3, 7, c3);
    cap_client_key(t4, 7, c4);
    cap_client_key(secret_a, 7, c);
    assert_memory_not_equal(c3, c4, CAP_KEY_LEN);
    assert_memory_not_equal(c3, c, CAP_KEY_LEN);
    assert_true(cap_client_ok(t3, 7, c3, CAP_KEY_LEN));
    assert_false(cap_client_ok(t4, 7, c3, CAP_KEY_LEN));
    assert_false(cap_client_ok(secret_a, 7, c3, CAP_KEY_LEN));
}

static void test_check(void **unused)
{
    (void)unused;
    uint8_t k7[CAP_KEY_LEN];
    cap_client_key(secret_a, 7, k7);
    assert_true(cap_client_ok(secret_a, 7, k7, CAP_KEY_LEN));
    /* Another client id, another secret, a short or long key, no key, one flipped bit. */
    assert_false(cap_client_ok(secret_a, 8, k7, CAP_KEY_LEN));
    assert_false(cap_client_ok(secret_b, 7, k7, CAP_KEY_LEN));
    assert_false(cap_client_ok(secret_a, 7, k7, CAP_KEY_LEN - 1));
    uint8_t longer[CAP_KEY_LEN + 1];
    memcpy(longer, k7, CAP_KEY_LEN);
    longer[CAP_KEY_LEN] = 0;
    assert_false(cap_client_ok(secret_a, 7, longer, sizeof longer));
    assert_false(cap_client_ok(secret_a, 7, NULL, 0));
    for (size_t i = 0; i < CAP_KEY_LEN * 8; i++) {
        uint8_t k[CAP_KEY_LEN];
        memcpy(k, k7, CAP_KEY_LEN);
        k[i / 8] ^= (uint8_t)(1u << (i % 8));
        assert_false(cap_client_ok(secret_a, 7, k, CAP_KEY_LEN));
    }
}

static void test_random(void **unused)
{
    (void)unused;
    uint8_t a[CAP_KEY_LEN], b[CAP_KEY_LEN];
    assert_int_equal(cap_random(a), 0);
    assert_int_equal(cap_random(b), 0);
    assert_memory_not_equal(a, b, CAP_KEY_LEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_derivation),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_task_keys),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
