/* What a waiting client says: the reason made from the facts (every branch, in its order of
 * precedence), the notes' due times, and the note's text. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "client/waiting.h"

struct reason_case {
    const char *name;
    struct wait_facts f;
    int rc;
    const char *want;
};

#define D "127.0.0.1:1234"

static void test_reason_table(void **state)
{
    (void)state;
    const struct reason_case cases[] = {
        {"idle client", {.dispatcher = D}, 0, ""},
        {"call under way",
         {.dispatcher = D, .disp_busy = true},
         1,
         "waiting for dispatcher " D " to answer"},
        {"dispatcher refused",
         {.dispatcher = D, .disp_down = true, .disp_why = "connect: connection refused"},
         1,
         "waiting for dispatcher " D ": connect: connection refused"},
        {"dispatcher away, no why",
         {.dispatcher = D, .disp_down = true},
         1,
         "waiting for dispatcher " D ": connecting"},
        {"read failed beats all",
         {.dispatcher = D, .disp_down = true, .read = true, .failed = "task 1: boom"},
         1,
         "task 1: boom"},
        {"read, dispatcher away",
         {.dispatcher = D, .disp_down = true, .disp_why = "x", .read = true, .job_id = 3},
         1,
         "waiting for dispatcher " D ": x"},
        {"read, no list",
         {.dispatcher = D, .read = true, .job_id = 3},
         2,
         "job 3: waiting for the dispatcher's task list"},
        {"read, no task",
         {.dispatcher = D, .read = true, .job_id = 3, .have_list = true},
         1,
         "job 3: no worker registered yet"},
        {"read, no task: no worker matches the job's selector",
         {.dispatcher = D,
          .read = true,
          .job_id = 3,
          .have_list = true,
          .no_worker_why = "waiting for a worker matching pool=b (none of 2 workers match)"},
         1,
         "job 3: waiting for a worker matching pool=b (none of 2 workers match)"},
        {"read, tasks running: the selector's reason is stale",
         {.dispatcher = D,
          .read = true,
          .job_id = 3,
          .have_list = true,
          .active = 1,
          .no_worker_why = "waiting for a worker matching pool=b (none of 2 workers match)"},
         2,
         "job 3: waiting for elements from 1 worker"},
        {"read, every worker lost",
         {.dispatcher = D, .read = true, .job_id = 3, .have_list = true, .cut = 4},
         1,
         "job 3: no worker left (4 copies cut short); waiting for a worker to register"},
        {"read, the one worker lost",
         {.dispatcher = D, .read = true, .job_id = 3, .have_list = true, .cut = 1},
         1,
         "job 3: no worker left (1 copy cut short); waiting for a worker to register"},
        {"read, cut copies but tasks run",
         {.dispatcher = D, .read = true, .job_id = 3, .have_list = true, .active = 1, .cut = 2},
         2,
         "job 3: waiting for elements from 1 worker"},
        {"read, worker unreachable",
         {.dispatcher = D,
          .read = true,
          .job_id = 3,
          .have_list = true,
          .active = 2,
          .worker = "127.0.0.1:4001",
          .worker_why = "connect: connection refused"},
         1,
         "waiting for worker 127.0.0.1:4001: connect: connection refused"},
        {"read, worker without why",
         {.dispatcher = D,
          .read = true,
          .job_id = 3,
          .have_list = true,
          .active = 1,
          .worker = "w:1"},
         1,
         "waiting for worker w:1: no answer"},
        {"read, every task ended",
         {.dispatcher = D, .read = true, .job_id = 3, .have_list = true, .ended = 2},
         2,
         "job 3: waiting for the dispatcher to end the read"},
        {"read, one worker",
         {.dispatcher = D, .read = true, .job_id = 3, .have_list = true, .active = 1},
         2,
         "job 3: waiting for elements from 1 worker"},
        {"coordinated, round asked",
         {.dispatcher = D,
          .read = true,
          .job_id = 1,
          .have_list = true,
          .active = 1,
          .consumers = 3,
          .round = 1234,
          .round_asked = true,
          .round_task = 5},
         2,
         "job 1: waiting for round 1234 from task 5, which serves a round once all 3 consumers "
         "ask for it"},
        {"coordinated, round not granted or scheduled yet",
         {.dispatcher = D,
          .read = true,
          .job_id = 2,
          .have_list = true,
          .active = 2,
          .consumers = 2,
          .round = 64},
         2,
         "job 2: waiting for the dispatcher to schedule round 64"},
        {"coordinated, a worker does not answer",
         {.dispatcher = D,
          .read = true,
          .job_id = 2,
          .have_list = true,
          .active = 1,
          .worker = "w:1",
          .worker_why = "connect: connection refused",
          .consumers = 2,
          .round = 64,
          .round_asked = true,
          .round_task = 3},
         1,
         "waiting for worker w:1: connect: connection refused"},
        {"read, two workers",
         {.dispatcher = D, .read = true, .job_id = 7, .have_list = true, .active = 2, .ended = 1},
         2,
         "job 7: waiting for elements from 2 workers"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[256];
        memset(buf, 'x', sizeof buf);
        int rc = wait_reason(&cases[i].f, buf, sizeof buf);
        if (rc != cases[i].rc || strcmp(buf, cases[i].want) != 0)
            print_error("case '%s': rc %d, '%s'\n", cases[i].name, rc, buf);
        assert_int_equal(rc, cases[i].rc);
        assert_string_equal(buf, cases[i].want);
    }
}

static void test_reason_truncates(void **state)
{
    (void)state;
    struct wait_facts f = {.dispatcher = D, .read = true, .job_id = 3, .have_list = true};
    char buf[8];
    assert_int_equal(wait_reason(&f, buf, sizeof buf), 1);
    assert_string_equal(buf, "job 3: ");
}

static void test_note_due(void **state)
{
    (void)state;
    const struct {
        uint64_t waited;
        unsigned printed;
        bool due;
    } cases[] = {
        {0, 0, false},    {1999, 0, false},  {2000, 0, true},  {5000, 0, true},
        {2000, 1, false}, {11999, 1, false}, {12000, 1, true}, {21999, 2, false},
        {22000, 2, true}, {22000, 3, false}, {32000, 3, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (wait_note_due(cases[i].waited, cases[i].printed) != cases[i].due)
            print_error("waited %llu printed %u\n", (unsigned long long)cases[i].waited,
                        cases[i].printed);
        assert_int_equal(wait_note_due(cases[i].waited, cases[i].printed), cases[i].due);
    }
}

static void test_note_format(void **state)
{
    (void)state;
    char buf[256];
    wait_note_format(buf, sizeof buf, "waiting for dispatcher " D ": connect: connection refused",
                     0);
    assert_string_equal(buf, "waiting for dispatcher " D
                             ": connect: connection refused (retrying; --timeout-ms to give up)");
    wait_note_format(buf, sizeof buf, "waiting for worker w:1: no answer", 3000);
    assert_string_equal(
        buf, "waiting for worker w:1: no answer (retrying; giving up after 3000 ms without "
             "progress)");
    wait_note_format(buf, sizeof buf, "job 3: no worker registered yet", 0);
    assert_string_equal(buf, "job 3: no worker registered yet (still waiting; --timeout-ms to "
                             "give up)");
    wait_note_format(buf, sizeof buf, "job 3: no worker registered yet", 6000);
    assert_string_equal(buf, "job 3: no worker registered yet (still waiting; giving up after "
                             "6000 ms without progress)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reason_table),
        cmocka_unit_test(test_reason_truncates),
        cmocka_unit_test(test_note_due),
        cmocka_unit_test(test_note_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
