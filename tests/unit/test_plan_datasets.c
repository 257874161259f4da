/* Planning dataset registration (plan_datasets.c): generated and explicit ids, what an existing
 * dataset must match, names that are not valid, and the limits on datasets and pipelines; each
 * case the exact updates or refusal (lib/state_harness.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/state_harness.h"

static const struct harness_case dataset_cases[] = {
    /* register_dataset */
    {"dataset generated", "", "ds - r10",
     "dataset_registered id=1 name='1' def='r10' text='r10'\n=> id=1"},
    {"dataset generated keeps compression and split size", "", "ds - r10 comp=1 split=3",
     "dataset_registered id=1 name='1' comp=1 split=3 def='r10' text='r10'\n=> id=1"},
    {"dataset anonymous duplicate shares the id", "ds - r10\nds - r20", "ds - r10", "=> id=1"},
    {"dataset anonymous with other compression is new", "ds - r10", "ds - r10 comp=1",
     "dataset_registered id=2 name='2' comp=1 def='r10' text='r10'\n=> id=2"},
    {"dataset anonymous never joins an explicit id", "ds a r10", "ds - r10",
     "dataset_registered id=1 name='1' def='r10' text='r10'\n=> id=1"},
    {"dataset generated skips a taken decimal id", "ds 1 x\nds 2 y", "ds - r10",
     "dataset_registered id=3 name='3' def='r10' text='r10'\n=> id=3"},
    {"dataset explicit", "", "ds mine r10",
     "dataset_registered name='mine' def='r10' text='r10'\n=> id=mine"},
    {"dataset explicit same definition", "ds mine r10", "ds mine r10", "=> id=mine"},
    {"dataset explicit other definition", "ds mine r10", "ds mine r11",
     "error EXISTS: dataset 'mine' already exists with a different pipeline"},
    {"dataset explicit same text other definition", "ds mine r10 text=t", "ds mine r11 text=t",
     "error EXISTS: dataset 'mine' already exists with the same pipeline but another "
     "definition: its deterministic setting differs, or the objects its URLs list changed since "
     "it was registered (their sizes or ETags); register it under another id"},
    {"dataset explicit other compression", "ds mine r10", "ds mine r10 comp=1",
     "error EXISTS: dataset 'mine' already exists with compression auto, not none"},
    {"dataset explicit other split size", "ds mine r10 split=8", "ds mine r10 split=16",
     "error EXISTS: dataset 'mine' already exists with split_size 8, not 16"},
    {"dataset id too long", "",
     "ds "
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx r10",
     "error INVALID: dataset id: 128 bytes, longer than the limit of 127"},
    {"dataset id not UTF-8", "",
     "ds ab\xff"
     "c r10",
     "error INVALID: dataset id: not valid UTF-8 at byte 2"},
    {"dataset id with a control character", "", "ds ab\x01 r10",
     "error INVALID: dataset id: control character at byte 2"},
    {"dataset id with a C1 control", "", "ds ab\xc2\x85 r10",
     "error INVALID: dataset id: control character at byte 2"},
    {"dataset id UTF-8", "", "ds caf\xc3\xa9 r10",
     "dataset_registered name='caf\xc3\xa9' def='r10' text='r10'\n=> id=caf\xc3\xa9"},
    /* limits */

    {"dataset limit reached", "limits datasets=2\nds a r1\nds b r2", "ds c r3",
     "error LIMIT: dataset limit reached: 2 datasets (--max-datasets)"},
    {"dataset limit reached, generated id", "limits datasets=2\nds a r1\nds b r2", "ds - r3",
     "error LIMIT: dataset limit reached: 2 datasets (--max-datasets)"},
    {"dataset limit: an existing dataset is still found", "limits datasets=2\nds a r1\nds - r2",
     "ds - r2", "=> id=1"},
    {"dataset limit: an existing explicit id is still found", "limits datasets=2\nds a r1\nds b r2",
     "ds a r1", "=> id=a"},
    {"dataset limit not yet reached", "limits datasets=2\nds a r1", "ds b r2",
     "dataset_registered name='b' def='r2' text='r2'\n=> id=b"},
    {"pipeline over the limit", "limits pipeline=4", "ds a range(100)",
     "error LIMIT: pipeline of 10 bytes is over the limit of 4 bytes (--max-pipeline-bytes)"},
    {"pipeline at the limit", "limits pipeline=4", "ds a r100",
     "dataset_registered name='a' def='r100' text='r100'\n=> id=a"},
};

static void test_dataset_cases(void **unused)
{
    (void)unused;
    HARNESS_RUN_CASES(dataset_cases);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dataset_cases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
