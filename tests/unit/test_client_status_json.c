/* Reading the dispatcher's status document: the tables `sluice status` prints, and the check
 * that a restarted dispatcher still holds a reader's job. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "client/status_json.h"
#include "common/error.h"

static void expect_table(const char *json, const char *want)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    char *out = NULL;
    assert_int_equal(status_json_table(json, &out, err, sizeof err), 0);
    assert_non_null(out);
    assert_string_equal(out, want);
    free(out);
}

static void test_table_full_document(void **state)
{
    expect_table("{\"incarnation\": 42, \"fault_tolerant\": true,"
                 " \"workers\": [{\"address\": \"127.0.0.1:5001\", \"incarnation\": 7,"
                 "               \"tasks\": [1, 2]},"
                 "              {\"address\": \"host-b:5002\", \"incarnation\": 123456789,"
                 "               \"tasks\": 0}],"
                 " \"datasets\": [{\"id\": \"d1\", \"pipeline\": \"range(10) | map(square)\"}],"
                 " \"jobs\": [{\"id\": 1, \"name\": \"\", \"dataset\": \"d1\","
                 "            \"mode\": \"parallel_epochs\", \"state\": \"active\","
                 "            \"clients\": 2, \"tasks\": [{\"id\": 3}, {\"id\": 4}]}]}",
                 "incarnation: 42\n"
                 "fault_tolerant: true\n"
                 "\n"
                 "workers (2)\n"
                 "  ADDRESS         INCARNATION  TASKS\n"
                 "  127.0.0.1:5001  7            2\n"
                 "  host-b:5002     123456789    0\n"
                 "\n"
                 "datasets (1)\n"
                 "  ID  PIPELINE\n"
                 "  d1  range(10) | map(square)\n"
                 "\n"
                 "jobs (1)\n"
                 "  ID  NAME  DATASET  MODE             STATE   CLIENTS  TASKS\n"
                 "  1   -     d1       parallel_epochs  active  2        2\n");
}

static void test_table_replica(void **state)
{
    (void)state;
    expect_table("{\"incarnation\": 42,"
                 " \"raft\": {\"id\": 2, \"role\": \"follower\", \"serving\": false,"
                 "            \"leader_id\": 3, \"term\": 7, \"commit_index\": 74,"
                 "            \"applied_index\": 74, \"last_index\": 74, \"leader_changes\": 4,"
                 "            \"state_digest\": \"45e31cdf67bfd1c9\", \"members\": []},"
                 " \"workers\": [], \"datasets\": [], \"jobs\": []}",
                 "incarnation: 42\n"
                 "replica: 2 follower, serving false, leader_id 3, term 7, commit_index 74, "
                 "applied_index 74, state_digest 45e31cdf67bfd1c9\n"
                 "\n"
                 "workers (0)\n"
                 "  none\n"
                 "\n"
                 "datasets (0)\n"
                 "  none\n"
                 "\n"
                 "jobs (0)\n"
                 "  none\n");
}

static void test_table_figures(void **state)
{
    (void)state;
    /* The columns of the figures a current dispatcher adds: shown when any entry has the field,
     * "-" in an entry that lacks it; rates with one decimal, bytes as MB, splits as
     * finished/total ("endless" for a null total), leased from the splits object. */
    expect_table(
        "{\"workers\": [{\"address\": \"a:1\", \"incarnation\": \"01\", \"tasks\": [1],"
        "  \"draining\": false, \"buffered\": 120, \"buffered_bytes\": 1250000,"
        "  \"elements_per_second\": 1234.56, \"bytes_per_second\": 2500000.0,"
        "  \"heartbeat_age_ms\": 85},"
        " {\"address\": \"b:2\", \"incarnation\": \"02\", \"tasks\": [],"
        "  \"draining\": true, \"heartbeat_age_ms\": null}],"
        " \"jobs\": [{\"id\": 1, \"name\": \"e\", \"dataset_id\": \"1\","
        "  \"mode\": \"distributed_epoch\", \"state\": \"active\", \"clients\": 2,"
        "  \"tasks\": [{\"id\": 1}], \"workers\": 1, \"elements_per_second\": 1234.56,"
        "  \"bytes_per_second\": 2500000.0, \"splits\": {\"total\": 40, \"finished\": 12,"
        "  \"leased\": 3}},"
        " {\"id\": 2, \"name\": null, \"dataset_id\": \"1\","
        "  \"mode\": \"distributed_epoch\", \"state\": \"active\", \"clients\": 1,"
        "  \"tasks\": [], \"workers\": 0, \"elements_per_second\": 0.0,"
        "  \"bytes_per_second\": 0.0, \"splits\": {\"total\": null, \"finished\": 7,"
        "  \"leased\": 0}},"
        " {\"id\": 3, \"name\": null, \"dataset_id\": \"1\","
        "  \"mode\": \"parallel_epochs\", \"state\": \"finished\", \"clients\": 0,"
        "  \"tasks\": [], \"workers\": 0, \"elements_per_second\": 0,"
        "  \"bytes_per_second\": 0}]}",
        "workers (2)\n"
        "  ADDRESS  INCARNATION  TASKS  DRAINING  BUFFERED  BUF_MB  ELEM/S  MB/S  "
        "HEARTBEAT\n"
        "  a:1      01           1      false     120       1.25    1234.6  2.50  85ms\n"
        "  b:2      02           0      true      -         -       -       -     -\n"
        "\n"
        "datasets (0)\n"
        "  none\n"
        "\n"
        "jobs (3)\n"
        "  ID  NAME  DATASET  MODE               STATE     CLIENTS  TASKS  WORKERS  SPLITS  "
        "   LEASED  ELEM/S  MB/S\n"
        "  1   e     1        distributed_epoch  active    2        1      1        12/40   "
        "   3       1234.6  2.50\n"
        "  2   -     1        distributed_epoch  active    1        0      0        "
        "7/endless  0       0.0     0.00\n"
        "  3   -     1        parallel_epochs    finished  0        0      0        -       "
        "   -       0.0     0.00\n");
}

/* Two jobs, the first's "hedged" count spliced in. */
#define HEDGED_DOC(N)                                                                              \
    "{\"jobs\": [{\"id\": 1, \"dataset_id\": \"1\", \"mode\": \"distributed_epoch\","              \
    " \"state\": \"active\", \"clients\": 1, \"tasks\": 3,"                                        \
    " \"splits\": {\"total\": 600, \"finished\": 80, \"leased\": 9, \"hedged\": " N "}},"          \
    " {\"id\": 2, \"dataset_id\": \"1\", \"mode\": \"parallel_epochs\","                           \
    " \"state\": \"active\", \"clients\": 1, \"tasks\": 3}]}"
#define HEDGED_HEAD "workers (0)\n  none\n\ndatasets (0)\n  none\n\njobs (2)\n"

static void test_table_hedged(void **state)
{
    (void)state;
    /* HEDGED shows once some job made copies; "-" for a job without the figure. */
    expect_table(HEDGED_DOC("17"), HEDGED_HEAD
                 "  ID  NAME  DATASET  MODE               STATE   CLIENTS  TASKS  SPLITS  LEASED"
                 "  HEDGED\n"
                 "  1   -     1        distributed_epoch  active  1        3      80/600  9     "
                 "  17\n"
                 "  2   -     1        parallel_epochs    active  1        3      -       -     "
                 "  -\n");
    expect_table(HEDGED_DOC("0"), HEDGED_HEAD
                 "  ID  NAME  DATASET  MODE               STATE   CLIENTS  TASKS  SPLITS  LEASED\n"
                 "  1   -     1        distributed_epoch  active  1        3      80/600  9\n"
                 "  2   -     1        parallel_epochs    active  1        3      -       -\n");
}

/* Labels and task slots: columns shown when a worker has them, "-" for one without. */
static void test_table_labels_and_slots(void **state)
{
    (void)state;
    expect_table("{\"workers\": [{\"address\": \"a:1\", \"incarnation\": \"01\", \"tasks\": [1],"
                 "  \"labels\": \"pool=bigmem\", \"task_slots\": 2},"
                 " {\"address\": \"b:2\", \"incarnation\": \"02\", \"tasks\": []}],"
                 " \"jobs\": []}",
                 "workers (2)\n"
                 "  ADDRESS  INCARNATION  LABELS       SLOTS  TASKS\n"
                 "  a:1      01           pool=bigmem  2      1\n"
                 "  b:2      02           -            -      0\n"
                 "\n"
                 "datasets (0)\n"
                 "  none\n"
                 "\n"
                 "jobs (0)\n"
                 "  none\n");
}

static void test_table_failed_job(void **state)
{
    (void)state;
    /* A failed job's error shows under the table, escaped like any other text. */
    expect_table("{\"jobs\": [{\"id\": 3, \"dataset_id\": \"d\", \"mode\": \"distributed_epoch\","
                 " \"state\": \"failed\", \"clients\": 1, \"tasks\": 2,"
                 " \"error\": \"map(scale): unknown function\\n\"},"
                 " {\"id\": 4, \"dataset_id\": \"d\", \"mode\": \"distributed_epoch\","
                 " \"state\": \"active\", \"clients\": 1, \"tasks\": 2, \"error\": \"\"}]}",
                 "workers (0)\n"
                 "  none\n"
                 "\n"
                 "datasets (0)\n"
                 "  none\n"
                 "\n"
                 "jobs (2)\n"
                 "  ID  NAME  DATASET  MODE               STATE   CLIENTS  TASKS\n"
                 "  3   -     d        distributed_epoch  failed  1        2\n"
                 "  4   -     d        distributed_epoch  active  1        2\n"
                 "  job 3 failed: map(scale): unknown function\\x0a\n");
}

static void test_table_sections_keyed_or_missing(void **state)
{
    /* Sections may be objects keyed by id, fields may use other names, sections may be absent,
     * and entries that are not objects are skipped. */
    expect_table("{\"jobs\": {\"5\": {\"dataset_id\": \"x\", \"mode\": \"distributed_epoch\","
                 "                    \"state\": \"finished\", \"num_clients\": 0,"
                 "                    \"num_tasks\": 3, \"extra\": {\"a\": 1}},"
                 "           \"6\": 17}}",
                 "workers (0)\n"
                 "  none\n"
                 "\n"
                 "datasets (0)\n"
                 "  none\n"
                 "\n"
                 "jobs (1)\n"
                 "  ID  NAME  DATASET  MODE               STATE     CLIENTS  TASKS\n"
                 "  5   -     x        distributed_epoch  finished  0        3\n");
    expect_table("{\"workers\": [], \"datasets\": \"none\", \"note\": null,"
                 " \"limits\": {\"max\": 3}}",
                 "note: -\n"
                 "\n"
                 "workers (0)\n"
                 "  none\n"
                 "\n"
                 "datasets (0)\n"
                 "  none\n"
                 "\n"
                 "jobs (0)\n"
                 "  none\n");
}

static void test_table_values(void **state)
{
    /* Objects in a cell print as compact JSON, floats in short form, and integers beyond int64
     * (which jansson refuses) with their exact digits, wherever they are. */
    expect_table("{\"workers\": [{\"address\": {\"host\": \"h\", \"port\": 1},"
                 " \"incarnation\": 18446744073709551615, \"tasks\": 2.5},"
                 " {\"address\": \"n\", \"incarnation\": -9223372036854775809,"
                 "  \"tasks\": [\"-1e400\", -92233720368547758070]}]}",
                 "workers (2)\n"
                 "  ADDRESS                INCARNATION           TASKS\n"
                 "  {\"host\":\"h\",\"port\":1}  18446744073709551615  2.5\n"
                 "  n                      -9223372036854775809  2\n"
                 "\n"
                 "datasets (0)\n"
                 "  none\n"
                 "\n"
                 "jobs (0)\n"
                 "  none\n");
}

/* Control characters in names (a dispatcher older than name checks may send them) show escaped,
 * so a name cannot break the table or forge lines of it. */
static void test_table_escapes_control_characters(void **state)
{
    (void)state;
    expect_table("{\"version\": \"x\\ny: 1\", \"workers\": [{\"address\": \"h:1\\ninfo forged\","
                 " \"incarnation\": \"01\", \"tasks\": []}],"
                 " \"datasets\": {\"d\\u0085\": {\"pipeline\": \"range(1)\"}}}",
                 "version: x\\x0ay: 1\n"
                 "\n"
                 "workers (1)\n"
                 "  ADDRESS             INCARNATION  TASKS\n"
                 "  h:1\\x0ainfo forged  01           0\n"
                 "\n"
                 "datasets (1)\n"
                 "  ID         PIPELINE\n"
                 "  d\\xc2\\x85  range(1)\n"
                 "\n"
                 "jobs (0)\n"
                 "  none\n");
}

static void test_table_rejects_non_objects(void **state)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    char *out = (char *)1;
    assert_int_equal(status_json_table("[1, 2]", &out, err, sizeof err), SLUICE_ERR_CORRUPT);
    assert_null(out);
    assert_string_equal(err, "status document: not a JSON object");
    assert_int_equal(status_json_table("{\"a\": ", &out, err, sizeof err), SLUICE_ERR_CORRUPT);
    assert_null(out);
    assert_true(strncmp(err, "status document: line 1 column ", 31) == 0);
    assert_int_equal(status_json_table("", &out, err, sizeof err), SLUICE_ERR_CORRUPT);
}

static void test_job_verdicts(void **state)
{
    /* The reference: job 2, anonymous, parallel_epochs, iteration 5, reading dataset "d2". */
    static const struct status_job_ref ref = {2, "d2", "", "parallel_epochs", 5};
    static const struct {
        const char *json;
        enum status_job_verdict want;
    } cases[] = {
        /* Present, with every field or with none but the id. */
        {"{\"jobs\": [{\"id\": 1, \"dataset_id\": \"d1\"}, {\"id\": 2, \"name\": null,"
         " \"dataset_id\": \"d2\", \"mode\": \"parallel_epochs\", \"iteration_id\": 5}]}",
         STATUS_JOB_PRESENT},
        {"{\"jobs\": [{\"id\": 2}]}", STATUS_JOB_PRESENT},
        {"{\"jobs\": [{\"job_id\": \"2\", \"dataset\": \"d2\", \"name\": \"\"}]}",
         STATUS_JOB_PRESENT},
        {"{\"jobs\": {\"2\": {\"dataset_id\": \"d2\"}}}", STATUS_JOB_PRESENT},
        {"{\"jobs\": {\"x\": {\"id\": 2, \"iteration_id\": \"5\"}}}", STATUS_JOB_PRESENT},
        /* The id names another job's entry, or none. */
        {"{\"jobs\": [{\"id\": 2, \"dataset_id\": \"d1\"}]}", STATUS_JOB_GONE},
        {"{\"jobs\": [{\"id\": 2, \"name\": \"shared\"}]}", STATUS_JOB_GONE},
        {"{\"jobs\": [{\"id\": 2, \"mode\": \"distributed_epoch\"}]}", STATUS_JOB_GONE},
        {"{\"jobs\": [{\"id\": 2, \"iteration_id\": 1}]}", STATUS_JOB_GONE},
        {"{\"jobs\": [{\"id\": 2, \"dataset_id\": 5}]}", STATUS_JOB_GONE},
        {"{\"jobs\": [{\"id\": 3, \"dataset_id\": \"d2\"}]}", STATUS_JOB_GONE},
        {"{\"jobs\": [{\"id\": \"2x\"}, {\"id\": -2}, 2]}", STATUS_JOB_GONE},
        {"{\"jobs\": {\"3\": {\"dataset_id\": \"d2\"}}}", STATUS_JOB_GONE},
        {"{\"jobs\": []}", STATUS_JOB_GONE},
        {"{\"jobs\": [{\"id\": 18446744073709551616}]}", STATUS_JOB_GONE},
        /* Nothing to tell from. */
        {"{\"workers\": []}", STATUS_JOB_UNKNOWN},
        {"{\"jobs\": 5}", STATUS_JOB_UNKNOWN},
        {"{\"jobs\": [", STATUS_JOB_UNKNOWN},
        {"[]", STATUS_JOB_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        enum status_job_verdict got = status_json_job(cases[i].json, &ref);
        if (got != cases[i].want)
            fail_msg("case %zu: %s: got %d, want %d", i, cases[i].json, got, cases[i].want);
    }

    /* A named job; fields a reference leaves out are not compared; the largest ids work. */
    static const struct status_job_ref named = {UINT64_MAX, "q", "shared", NULL, 0};
    assert_int_equal(status_json_job("{\"jobs\": [{\"id\": 18446744073709551615, \"name\": "
                                     "\"shared\", \"dataset_id\": \"q\", \"mode\": \"hint\","
                                     " \"iteration_id\": 9}]}",
                                     &named),
                     STATUS_JOB_PRESENT);
    assert_int_equal(status_json_job("{\"jobs\": [{\"id\": 18446744073709551615, \"name\": "
                                     "null}]}",
                                     &named),
                     STATUS_JOB_GONE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_full_document),
        cmocka_unit_test(test_table_replica),
        cmocka_unit_test(test_table_figures),
        cmocka_unit_test(test_table_hedged),
        cmocka_unit_test(test_table_labels_and_slots),
        cmocka_unit_test(test_table_failed_job),
        cmocka_unit_test(test_table_sections_keyed_or_missing),
        cmocka_unit_test(test_table_values),
        cmocka_unit_test(test_table_escapes_control_characters),
        cmocka_unit_test(test_table_rejects_non_objects),
        cmocka_unit_test(test_job_verdicts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
