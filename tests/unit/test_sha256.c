/* SHA-256 against the FIPS 180-4 examples and OpenSSL's answers for lengths around the block
 * and padding boundaries. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/sha256.h"

#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_known(void **unused)
{
    (void)unused;
    char hex[SHA256_HEX_LEN + 1];
    sha256_hex("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha256_hex(two, strlen(two), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_lengths(void **unused)
{
    (void)unused;
    uint8_t data[300];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 131 + 7);
    for (size_t len = 0; len <= sizeof data; len++) {
        uint8_t got[SHA256_LEN], want[SHA256_LEN];
        sha256(data, len, got);
        SHA256(data, len, want);
        if (memcmp(got, want, SHA256_LEN) != 0)
            fail_msg("length %zu differs from OpenSSL", len);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known),
        cmocka_unit_test(test_lengths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
