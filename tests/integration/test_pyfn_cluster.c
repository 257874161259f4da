/* Python functions end to end: a module written to a temp dir, real workers started with
 * --python-path to it, and the `sluice` CLI reading map(py, ...) and filter(py, ...) pipelines
 * in parallel_epochs and distributed_epoch; exact multisets of elements, exact error lines. Also
 * the same functions in `sluice run` and in a --local tail (the CLI's own interpreter), and a
 * worker without Python (one started in this process, which has none). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/text.h"
#include "lib/tmp.h"

#include "sluice/server.h"
#include "sluice/sluice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define WAIT_MS 30000

/* The module the tests call; BAD_LINE is the line of bad()'s raise. */
static const char module_text[] =
    "import numpy as np\n"                                 /* 1 */
    "\n"                                                   /* 2 */
    "def square(x):\n"                                     /* 3 */
    "    return int(x) * int(x)\n"                         /* 4 */
    "\n"                                                   /* 5 */
    "def bad(x):\n"                                        /* 6 */
    "    if int(x) == 7:\n"                                /* 7 */
    "        raise ValueError('bad pixel')\n"              /* 8 */
    "    return x\n"                                       /* 9 */
    "\n"                                                   /* 10 */
    "def halves(x):\n"                                     /* 11 */
    "    return np.arange(int(x), dtype=np.float64) / 2\n" /* 12 */
    "\n"                                                   /* 13 */
    "def label(x):\n"                                      /* 14 */
    "    return b'item-%d' % int(x)\n"                     /* 15 */
    "\n"                                                   /* 16 */
    "def pair(x):\n"                                       /* 17 */
    "    return (np.int32(x), np.array([x, -x], dtype=np.int16), b'p%d' % int(x))\n"
    "\n"
    "def scaled(x, k, offset, name, flag):\n"
    "    assert isinstance(name, str) and isinstance(flag, bool)\n"
    "    return (int(x) * k + offset, name.encode() if flag else b'')\n"
    "\n"
    "def odd(x):\n"
    "    return int(x) % 2 == 1\n"
    "\n"
    "def bump(x):\n"
    "    x += 100\n"
    "    return x\n"
    "\n"
    "def wrong(x):\n"
    "    return [int(x)]\n"
    "\n"
    "load = np.load\n";
#define BAD_LINE "8"

static char mod_dir[512];
static char path_arg[600];

static int setup(void **state)
{
    snprintf(mod_dir, sizeof mod_dir, "%s/pymods", tmp_dir());
    if (mkdir(mod_dir, 0700) != 0)
        return -1;
    file_write_in(mod_dir, "fns.py", module_text);
    /* `sluice run` and --local tails find the module through PYTHONPATH. */
    setenv("PYTHONPATH", mod_dir, 1);
    snprintf(path_arg, sizeof path_arg, "%s", mod_dir);
    static const char *worker_args[] = {"--python-path", path_arg, NULL};
    return (*state = cluster_new(NULL, worker_args, 0, 0)) ? 0 : -1;
}

static int teardown(void **state)
{
    int rc = cluster_free(*state);
    tmp_cleanup();
    return rc;
}

#ifdef SLUICE_WORKER_HAS_PYTHON

static void ensure_workers(struct cluster *c)
{
    while (c->nworkers < 2)
        assert_true(cluster_add_worker(c) >= 0);
}

/* Reads pipeline in mode with the CLI (extra: up to two more arguments) and asserts status 0
 * and the exact multiset of output lines. */
static void read_expect(struct cluster *c, const char *pipeline, const char *mode, const char *x1,
                        const char *x2, const char *want_unsorted)
{
    cluster_expect_read(c, want_unsorted, pipeline, "--mode", mode, x1, x2, NULL);
}

/* Reads and asserts the exact failure: exit status 1 and one error line. */
static void read_fails(struct cluster *c, const char *pipeline, const char *mode,
                       const char *want_err)
{
    char *out = NULL, *err = NULL;
    int rc = cluster_cli(c, &out, &err, "read", pipeline, "--mode", mode, NULL);
    char want[1024];
    snprintf(want, sizeof want, "sluice: read: %s\n", want_err);
    if (rc != 1 || strcmp(err, want) != 0)
        fprintf(stderr, "%s (%s): status %d, stderr: %s", pipeline, mode, rc, err);
    assert_int_equal(rc, 1);
    assert_string_equal(err, want);
    free(out);
    free(err);
}

/* The lines fmt % f(i) for i < count, each times times. */
static char *lines_of(long count, int times, const char *fmt, long (*f)(long))
{
    size_t cap = (size_t)count * (size_t)times * 96 + 1;
    char *text = malloc(cap);
    assert_non_null(text);
    size_t len = 0;
    text[0] = '\0';
    for (long i = 0; i < count; i++)
        for (int t = 0; t < times; t++)
            len += (size_t)text_format(text + len, cap - len, fmt, f(i));
    return text;
}

static long sq(long i)
{
    return i * i;
}

static long id(long i)
{
    return i;
}

static long odd_nth(long i)
{
    return 2 * i + 1;
}

static void test_maps(void **state)
{
    struct cluster *c = *state;
    ensure_workers(c);
    /* int64 scalars: every element once across both workers, or once per worker. */
    char *want = lines_of(500, 1, "%ld\n", sq);
    read_expect(c, "range(500) | map(py, \"fns:square\")", "distributed_epoch", NULL, NULL, want);
    free(want);
    want = lines_of(100, 2, "%ld\n", sq);
    read_expect(c, "range(100) | map(py, \"fns:square\")", "parallel_epochs", NULL, NULL, want);
    free(want);

    /* float arrays, bytes, tuples of a numpy scalar, an array and bytes. */
    read_expect(c, "range(4) | map(py, \"fns:halves\")", "distributed_epoch", NULL, NULL,
                "[]\n[0]\n[0, 0.5]\n[0, 0.5, 1]\n");
    want = lines_of(50, 1, "item-%ld\n", id);
    read_expect(c, "range(50) | map(py, \"fns:label\")", "distributed_epoch", NULL, NULL, want);
    free(want);
    read_expect(c, "range(3) | map(py, \"fns:pair\")", "parallel_epochs", NULL, NULL,
                "(0, [0, 0], p0)\n(1, [1, -1], p1)\n(2, [2, -2], p2)\n"
                "(0, [0, 0], p0)\n(1, [1, -1], p1)\n(2, [2, -2], p2)\n");

    /* Extra literal arguments: an int, a float, a string and a bool, after the element. */
    read_expect(c, "range(3) | map(py, \"fns:scaled\", 3, 0.5, \"ab\", true)", "distributed_epoch",
                NULL, NULL, "(0.5, ab)\n(3.5, ab)\n(6.5, ab)\n");
    /* Python functions and built-ins in one pipeline, batched after. */
    read_expect(c, "range(6) | map(py, \"fns:square\") | map(add, 1) | batch(3)",
                "distributed_epoch", NULL, NULL, "[1, 2, 5]\n[10, 17, 26]\n");
}

static void test_filter(void **state)
{
    struct cluster *c = *state;
    ensure_workers(c);
    char *want = lines_of(250, 1, "%ld\n", odd_nth);
    read_expect(c, "range(500) | filter(py, \"fns:odd\")", "distributed_epoch", NULL, NULL, want);
    free(want);
    read_expect(c, "range(6) | filter(py, \"fns:odd\") | map(py, \"fns:square\")",
                "parallel_epochs", NULL, NULL, "1\n9\n25\n1\n9\n25\n");
}

/* bump() adds 100 to its argument in place and returns it. The list() source's values are
 * reused on every pass of the repeat, so a function that could write into them would show 201,
 * 301, ... on later passes; batches the same. */
static void test_mutation(void **state)
{
    struct cluster *c = *state;
    ensure_workers(c);
    const char *want = "[101, 102]\n[103, 104]\n[101, 102]\n[103, 104]\n[101, 102]\n[103, 104]\n";
    read_expect(c, "list([1, 2], [3, 4]) | repeat(3) | map(py, \"fns:bump\")", "distributed_epoch",
                NULL, NULL, want);
    read_expect(c,
                "range(2) | batch(2) | repeat(2) | map(py, \"fns:bump\") | map(py, \"fns:bump\")",
                "parallel_epochs", NULL, NULL, "[200, 201]\n[200, 201]\n[200, 201]\n[200, 201]\n");
}

static void test_errors(void **state)
{
    struct cluster *c = *state;
    ensure_workers(c);
    /* A module found nowhere is, in particular, not in the worker's --python-path. */
    read_fails(c, "range(10) | map(py, \"aug:flip\")", "distributed_epoch",
               "map(py, \"aug:flip\"): module 'aug' is not in the worker's --python-path");
    /* Code only from the worker's own --python-path: not the standard library (also when the
     * reader's PYTHONPATH or the worker's sys.path would find it), nor through an allowed
     * module's own imports. */
    read_fails(c, "range(1) | map(py, \"os:system\", \"touch /tmp/sluice-pwned\")",
               "parallel_epochs",
               "map(py, \"os:system\"): module 'os' is not in the worker's --python-path");
    read_fails(c, "range(1) | filter(py, \"subprocess:call\")", "distributed_epoch",
               "filter(py, \"subprocess:call\"): module 'subprocess' is not in the worker's "
               "--python-path");
    read_fails(c, "range(1) | map(py, \"builtins:print\")", "parallel_epochs",
               "map(py, \"builtins:print\"): module 'builtins' is not in the worker's "
               "--python-path");
    read_fails(c, "range(1) | map(py, \"numpy:load\")", "parallel_epochs",
               "map(py, \"numpy:load\"): module 'numpy' is not in the worker's --python-path");
    read_fails(c, "list(\"/etc/passwd\") | map(py, \"fns:__loader__.get_data\")", "parallel_epochs",
               "map(py, \"fns:__loader__.get_data\"): fns:__loader__.get_data is defined in "
               "module '_frozen_importlib_external', which is not in the worker's --python-path");
    read_fails(c, "list(\"/etc/passwd\") | map(py, \"fns:load\")", "parallel_epochs",
               "map(py, \"fns:load\"): fns:load is defined in module 'numpy', which is not in "
               "the worker's --python-path");
    read_fails(c, "range(1) | map(py, \"fns:np.load\")", "parallel_epochs",
               "map(py, \"fns:np.load\"): fns:np.load leads into module 'numpy'; name a "
               "function of module 'fns' itself");
    read_fails(c, "range(10) | filter(py, \"fns:flip\")", "parallel_epochs",
               "filter(py, \"fns:flip\"): AttributeError: module 'fns' has no attribute 'flip'");
    read_fails(c, "range(10) | map(py, \"fns:bad\")", "distributed_epoch",
               "map(py, \"fns:bad\"): ValueError: bad pixel (fns.py:" BAD_LINE ")");
    read_fails(c, "range(10) | map(py, \"fns:wrong\")", "parallel_epochs",
               "map(py, \"fns:wrong\"): returned list, expected a numpy array, a number, bytes or "
               "a tuple of them");
    read_fails(c, "range(10) | map(py, \"fns:scaled\", 1)", "distributed_epoch",
               "map(py, \"fns:scaled\"): TypeError: scaled() missing 3 required positional "
               "arguments: 'offset', 'name', and 'flag'");
    /* A malformed target never reaches a worker. */
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "read", "range(3) | map(py, \"fns.square\")", NULL),
                     2);
    assert_string_equal(err, "sluice: pipeline: column 12: map(py): expected \"module:function\", "
                             "got \"fns.square\"\n");
    free(out);
    free(err);
}

/* The CLI's own interpreter: `sluice run`, and a --local tail on what the workers serve. */
static void test_local(void **state)
{
    struct cluster *c = *state;
    ensure_workers(c);
    char *const argv[] = {(char *)bin_path("sluice"), "run",
                          "range(5) | filter(py, \"fns:odd\") | map(py, \"fns:pair\")", NULL};
    char *out = NULL, *err = NULL;
    assert_int_equal(run_cmd(argv, WAIT_MS, &out, &err), 0);
    assert_string_equal(out, "(1, [1, -1], p1)\n(3, [3, -3], p3)\n");
    assert_string_equal(err, "");
    free(out);
    free(err);
    read_expect(c, "range(4) | map(py, \"fns:square\")", "distributed_epoch", "--local",
                "map(py, \"fns:square\")", "0\n1\n16\n81\n");
}

#else

static void test_maps(void **state)
{
    (void)state;
    skip();
}
#define test_filter test_maps
#define test_mutation test_maps
#define test_errors test_maps
#define test_local test_maps

#endif

/* A worker in a process without Python (this test program links no interpreter): python_path
 * is refused at start, and a py op fails its task with a message that reaches the reader. */
static void test_no_python(void **state)
{
    (void)state;
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_dispatcher *d = NULL;
    struct sluice_dispatcher_options dopts = {.log_level = "off"};
    assert_int_equal(sluice_dispatcher_start(&dopts, &d, err, sizeof err), 0);
    const char *target = sluice_dispatcher_target(d);

    const char *dirs[] = {mod_dir};
    struct sluice_worker_options wopts = {.dispatcher = target,
                                          .threads = 1,
                                          .log_level = "off",
                                          .python_path = dirs,
                                          .npython_path = 1};
    struct sluice_worker *w = NULL;
    assert_int_equal(sluice_worker_start(&wopts, &w, err, sizeof err), SLUICE_ERR_UNSUPPORTED);
    assert_string_equal(err, "python_path: this worker has no Python support");
    assert_null(w);
    wopts.python_path = NULL;
    wopts.npython_path = 0;
    assert_int_equal(sluice_worker_start(&wopts, &w, err, sizeof err), 0);

    struct sluice_client *cl = NULL;
    struct sluice_client_options co = {.dispatcher = target, .timeout_ms = WAIT_MS};
    assert_int_equal(sluice_client_open(&co, &cl, err, sizeof err), 0);
    static const enum sluice_mode modes[] = {SLUICE_DISTRIBUTED_EPOCH, SLUICE_PARALLEL_EPOCHS};
    for (size_t m = 0; m < 2; m++) {
        struct sluice_read_options ro = {.pipeline = "range(10) | map(py, \"aug:flip\")",
                                         .mode = modes[m]};
        struct sluice_iterator *it = NULL;
        assert_int_equal(sluice_iterator_open(cl, &ro, &it, err, sizeof err), 0);
        const struct sluice_element *e;
        int rc = sluice_iterator_next(it, &e, WAIT_MS, err, sizeof err);
        assert_int_equal(rc, SLUICE_ERR_TASK_FAILED);
        assert_string_equal(err, "map(py, \"aug:flip\"): this worker has no Python support");
        sluice_iterator_close(it);
    }
    sluice_client_close(cl);
    sluice_worker_stop(w);
    sluice_dispatcher_stop(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_maps),     cmocka_unit_test(test_filter),
        cmocka_unit_test(test_mutation), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_local),    cmocka_unit_test(test_no_python),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
