/* Host ids (common/hostid.h): validation, composition from the kernel's boot id and the network
 * namespace link, and the SLUICE_HOST_ID override. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/hostid.h"
#include "sluice/sluice.h"

#include <stdlib.h>
#include <string.h>

struct check_case {
    const char *id;
    int rc;
    const char *msg;
};

static void test_check(void **unused)
{
    (void)unused;
    char long_id[HOSTID_MAX + 2];
    memset(long_id, 'x', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    char max_id[HOSTID_MAX + 1];
    memset(max_id, 'y', sizeof max_id - 1);
    max_id[sizeof max_id - 1] = '\0';
    const struct check_case cases[] = {
        {"node-7.example", 0, ""},
        {"a", 0, ""},
        {"f4cbaf1a-6f93-4864-bdf3-e08c506b701e-net4026531833", 0, ""},
        {"~!@#$%^&*()_+{}|:<>?", 0, ""},
        {max_id, 0, ""},
        {"", SLUICE_ERR_INVALID, "SLUICE_HOST_ID: empty"},
        {"a b", SLUICE_ERR_INVALID, "SLUICE_HOST_ID: byte 1 is not printable ASCII without spaces"},
        {"ab\t", SLUICE_ERR_INVALID,
         "SLUICE_HOST_ID: byte 2 is not printable ASCII without spaces"},
        {"\x7f", SLUICE_ERR_INVALID,
         "SLUICE_HOST_ID: byte 0 is not printable ASCII without spaces"},
        {"caf\xc3\xa9", SLUICE_ERR_INVALID,
         "SLUICE_HOST_ID: byte 3 is not printable ASCII without spaces"},
        {long_id, SLUICE_ERR_INVALID, "SLUICE_HOST_ID: 128 bytes, longer than the limit of 127"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[SLUICE_ERRMSG_SIZE] = "";
        int rc = hostid_check("SLUICE_HOST_ID", cases[i].id, err, sizeof err);
        if (rc != cases[i].rc || strcmp(err, cases[i].msg) != 0)
            fail_msg("case %zu: got %d '%s', expected %d '%s'", i, rc, err, cases[i].rc,
                     cases[i].msg);
    }
}

struct compose_case {
    const char *boot, *netns;
    int rc;
    const char *out; /* the id, or the message */
};

static void test_compose(void **unused)
{
    (void)unused;
    const struct compose_case cases[] = {
        {"f4cbaf1a-6f93-4864-bdf3-e08c506b701e\n", "net:[4026531833]", 0,
         "f4cbaf1a-6f93-4864-bdf3-e08c506b701e-net4026531833"},
        {"F4CBAF1A-6F93-4864-BDF3-E08C506B701E", "net:[1]", 0,
         "F4CBAF1A-6F93-4864-BDF3-E08C506B701E-net1"},
        {"f4cbaf1a-6f93-4864-bdf3-e08c506b701e\n", NULL, 0, "f4cbaf1a-6f93-4864-bdf3-e08c506b701e"},
        {"f4cbaf1a-6f93-4864-bdf3-e08c506b701e", "", 0, "f4cbaf1a-6f93-4864-bdf3-e08c506b701e"},
        {"f4cbaf1a-6f93-4864-bdf3-e08c506b701", "net:[1]", SLUICE_ERR_INVALID,
         "the kernel's boot id is not a UUID"},
        {"f4cbaf1a_6f93-4864-bdf3-e08c506b701e", "net:[1]", SLUICE_ERR_INVALID,
         "the kernel's boot id is not a UUID"},
        {"g4cbaf1a-6f93-4864-bdf3-e08c506b701e", "net:[1]", SLUICE_ERR_INVALID,
         "the kernel's boot id is not a UUID"},
        {"", "net:[1]", SLUICE_ERR_INVALID, "the kernel's boot id is not a UUID"},
        {"f4cbaf1a-6f93-4864-bdf3-e08c506b701e", "net:[]", SLUICE_ERR_INVALID,
         "the network namespace link is not of the form net:[INODE]"},
        {"f4cbaf1a-6f93-4864-bdf3-e08c506b701e", "mnt:[4026531833]", SLUICE_ERR_INVALID,
         "the network namespace link is not of the form net:[INODE]"},
        {"f4cbaf1a-6f93-4864-bdf3-e08c506b701e", "net:[12x]", SLUICE_ERR_INVALID,
         "the network namespace link is not of the form net:[INODE]"},
        {"f4cbaf1a-6f93-4864-bdf3-e08c506b701e", "net:[99999999999999999999999]",
         SLUICE_ERR_INVALID, "the network namespace inode is out of range"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[HOSTID_MAX + 1] = "", err[SLUICE_ERRMSG_SIZE] = "";
        int rc = hostid_compose(cases[i].boot, cases[i].netns, out, sizeof out, err, sizeof err);
        const char *got = rc == 0 ? out : err;
        if (rc != cases[i].rc || strcmp(got, cases[i].out) != 0)
            fail_msg("case %zu: got %d '%s', expected %d '%s'", i, rc, got, cases[i].rc,
                     cases[i].out);
        if (rc == 0) {
            char why[SLUICE_ERRMSG_SIZE];
            assert_int_equal(hostid_check("host id", out, why, sizeof why), 0);
        }
    }
}

static void test_get(void **unused)
{
    (void)unused;
    char out[HOSTID_MAX + 1], err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(setenv(HOSTID_ENV, "node-a", 1), 0);
    assert_int_equal(hostid_get(out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "node-a");
    assert_int_equal(setenv(HOSTID_ENV, "node a", 1), 0);
    assert_int_equal(hostid_get(out, sizeof out, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "SLUICE_HOST_ID: byte 4 is not printable ASCII without spaces");
    assert_int_equal(setenv(HOSTID_ENV, "", 1), 0);
    assert_int_equal(hostid_get(out, sizeof out, err, sizeof err), SLUICE_ERR_INVALID);
    assert_string_equal(err, "SLUICE_HOST_ID: empty");
    assert_int_equal(unsetenv(HOSTID_ENV), 0);
    /* Detected: the same in every call, and a valid id (this runs on Linux, which has both). */
    char again[HOSTID_MAX + 1];
    assert_int_equal(hostid_get(out, sizeof out, err, sizeof err), 0);
    assert_int_equal(hostid_get(again, sizeof again, err, sizeof err), 0);
    assert_string_equal(out, again);
    assert_int_equal(hostid_check("host id", out, err, sizeof err), 0);
    assert_non_null(strstr(out, "-net"));
}

static void test_target_names(void **unused)
{
    (void)unused;
    enum sluice_target_workers t = SLUICE_TARGET_WORKERS_ANY;
    assert_int_equal(sluice_target_workers_parse("local", &t), 0);
    assert_int_equal(t, SLUICE_TARGET_WORKERS_LOCAL);
    assert_int_equal(sluice_target_workers_parse("auto", &t), 0);
    assert_int_equal(t, SLUICE_TARGET_WORKERS_AUTO);
    assert_int_equal(sluice_target_workers_parse("any", &t), 0);
    assert_int_equal(t, SLUICE_TARGET_WORKERS_ANY);
    assert_int_equal(sluice_target_workers_parse("LOCAL", &t), SLUICE_ERR_INVALID);
    assert_int_equal(sluice_target_workers_parse("", &t), SLUICE_ERR_INVALID);
    assert_int_equal(sluice_target_workers_parse(NULL, &t), SLUICE_ERR_INVALID);
    assert_int_equal(t, SLUICE_TARGET_WORKERS_ANY);
    assert_string_equal(sluice_target_workers_name(SLUICE_TARGET_WORKERS_AUTO), "auto");
    assert_null(sluice_target_workers_name((enum sluice_target_workers)3));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_compose),
        cmocka_unit_test(test_get),
        cmocka_unit_test(test_target_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
