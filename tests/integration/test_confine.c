/* Confined file access and code loading: --data-root on the dispatcher and the worker, and py
 * functions only from the worker's --python-path.
 *
 * A temp dir holds ROOT (the data root), files beside it that must stay unreadable, ROOT2 (a
 * sibling whose name only begins with ROOT's) and symbolic links inside ROOT that lead out. The
 * first group checks the roots functions on those files in this process; the second runs a
 * dispatcher and a worker both with --data-root ROOT; the third a dispatcher without roots and a
 * worker with them, whose own check is then the one that refuses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "lib/cluster.h"
#include "lib/file.h"
#include "lib/proc.h"
#include "lib/text.h"
#include "lib/tmp.h"
#include "pipeline/roots.h"
#include "pipeline/spec.h"
#include "sluice/sluice.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WAIT_MS 60000

/* Resolved (realpath) paths of the fixture, as the messages print them. */
static char base[400];
static char root[448];   /* BASE/root */
static char root2[448];  /* BASE/root2 */
static char secret[448]; /* BASE/secret.txt */
static char mods[448];   /* BASE/mods: the worker's --python-path */
static char root_arg[448], mods_arg[448];

static void link_to(const char *target, const char *dir, const char *name)
{
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(symlink(target, path), 0);
}

/* The fixture:
 *   BASE/secret.txt               "secret"
 *   BASE/root/a.txt               "alpha\nbeta"
 *   BASE/root/link.txt ->         BASE/secret.txt
 *   BASE/root/up ->               BASE (a directory link leading out)
 *   BASE/root/glob/x1.txt         "x1"
 *   BASE/root/glob/x2.txt ->      BASE/secret.txt
 *   BASE/root/inner ->            BASE/root/glob (a link that stays inside)
 *   BASE/root2/c.txt              "c"
 *   BASE/mods/confmod.py          def double(x)
 */
static int make_fixture(void)
{
    char real[PATH_MAX];
    if (!realpath(tmp_dir(), real) || strlen(real) >= sizeof base)
        return -1;
    snprintf(base, sizeof base, "%.399s", real);
    snprintf(root, sizeof root, "%s/root", base);
    snprintf(root2, sizeof root2, "%s/root2", base);
    snprintf(secret, sizeof secret, "%s/secret.txt", base);
    snprintf(mods, sizeof mods, "%s/mods", base);
    char glob_dir[1024];
    snprintf(glob_dir, sizeof glob_dir, "%s/glob", root);
    if (mkdir(root, 0700) || mkdir(root2, 0700) || mkdir(mods, 0700) || mkdir(glob_dir, 0700))
        return -1;
    file_write_in(base, "secret.txt", "secret\n");
    file_write_in(root, "a.txt", "alpha\nbeta\n");
    link_to(secret, root, "link.txt");
    link_to(base, root, "up");
    file_write_in(glob_dir, "x1.txt", "x1\n");
    link_to(secret, glob_dir, "x2.txt");
    link_to(glob_dir, root, "inner");
    file_write_in(root2, "c.txt", "c\n");
    file_write_in(mods, "confmod.py", "def double(x):\n    return int(x) * 2\n");
    snprintf(root_arg, sizeof root_arg, "%s", root);
    snprintf(mods_arg, sizeof mods_arg, "%s", mods);
    return 0;
}

/* ---- The roots functions, on real files ----------------------------------------------------- */

static int fs_setup(void **state)
{
    (void)state;
    return make_fixture();
}

static void test_roots_init(void **state)
{
    (void)state;
    struct pipe_roots r;
    char err[SLUICE_ERRMSG_SIZE];
    char missing[1024], with_dots[1024], file[1024];
    snprintf(missing, sizeof missing, "%s/nowhere", base);
    const char *dirs[] = {missing};
    assert_int_equal(pipe_roots_init(&r, dirs, 1, err, sizeof err), -ENOENT);
    char want[2048];
    snprintf(want, sizeof want, "data root %s: No such file or directory", missing);
    assert_string_equal(err, want);
    pipe_roots_release(&r);

    snprintf(file, sizeof file, "%s/a.txt", root);
    dirs[0] = file;
    assert_int_equal(pipe_roots_init(&r, dirs, 1, err, sizeof err), SLUICE_ERR_INVALID);
    snprintf(want, sizeof want, "data root %s: not a directory", file);
    assert_string_equal(err, want);
    pipe_roots_release(&r);

    /* Resolved at start: "..", a trailing slash and a link all become the real directory. */
    snprintf(with_dots, sizeof with_dots, "%s/glob/../", root);
    char through_link[1024];
    snprintf(through_link, sizeof through_link, "%s/up/root", root);
    const char *three[] = {with_dots, through_link, root};
    assert_int_equal(pipe_roots_init(&r, three, 3, err, sizeof err), 0);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.dirs[0], root);
    pipe_roots_release(&r);
}

/* pipe_path_resolve of ROOT REST succeeds with want. */
static void resolve_expect(const char *rest, const char *want)
{
    char out[PATH_MAX], path[1024];
    snprintf(path, sizeof path, "%s%s", root, rest);
    assert_int_equal(pipe_path_resolve(path, out, sizeof out), 0);
    assert_string_equal(out, want);
}

static void test_resolve(void **state)
{
    (void)state;
    char want[1024];
    resolve_expect("/link.txt", secret);
    /* A missing file below a link: the link is still followed. */
    snprintf(want, sizeof want, "%s/nothing/here.txt", base);
    resolve_expect("/up/nothing/here.txt", want);
    /* ".." after a missing component is taken lexically. */
    resolve_expect("/missing/../../secret.txt", secret);
    snprintf(want, sizeof want, "%s/glob/x1.txt", root);
    resolve_expect("/inner/x1.txt", want);
}

/* Checks lines(glob) against ROOT: 0, or the exact denial naming resolved. */
static void check_glob_expect(const char *glob, const char *resolved)
{
    struct pipe_roots r;
    char err[SLUICE_ERRMSG_SIZE] = "";
    const char *dirs[] = {root};
    assert_int_equal(pipe_roots_init(&r, dirs, 1, err, sizeof err), 0);
    char *globs[] = {(char *)glob};
    struct pipe_source src = {.kind = PIPE_SRC_LINES, .globs = globs, .nglobs = 1};
    int rc = pipe_roots_check_source(&r, &src, err, sizeof err);
    if (!resolved) {
        if (rc != 0)
            fprintf(stderr, "%s: %s\n", glob, err);
        assert_int_equal(rc, 0);
    } else {
        char want[4096];
        snprintf(want, sizeof want, "lines(\"%s\"): %s is outside the data roots (%s)", glob,
                 resolved, root);
        assert_int_equal(rc, SLUICE_ERR_DENIED);
        assert_string_equal(err, want);
    }
    pipe_roots_release(&r);
}

/* check_glob_expect on the glob DIR REST. */
static void check_in(const char *dir, const char *rest, const char *resolved)
{
    char g[1024];
    snprintf(g, sizeof g, "%s%s", dir, rest);
    check_glob_expect(g, resolved);
}

static void test_check_source(void **state)
{
    (void)state;
    check_in(root, "/a.txt", NULL);
    check_in(root, "/glob/x1.txt", NULL);
    check_in(root, "/inner/x1.txt", NULL);
    check_in(root, "/../root/a.txt", NULL);
    /* Matching nothing inside is no refusal here (reading it reports the missing file). */
    check_in(root, "/none*.txt", NULL);
    check_glob_expect("/etc/passwd", "/etc/passwd");
    check_in(root, "/../secret.txt", secret);
    check_in(root, "/link.txt", secret);
    check_in(root, "/glob/*", secret);
    char g[1024], base_nothing[1024];
    snprintf(g, sizeof g, "%s/c.txt", root2);
    check_glob_expect(g, g);
    /* The directory part leads out through a link, though nothing matches. */
    check_in(root, "/up/nothing*.txt", base);
    snprintf(base_nothing, sizeof base_nothing, "%s/nothing", base);
    check_in(root, "/up/nothing/*.txt", base_nothing);
    check_in(root2, "/*", root2);
}

static void test_open_file(void **state)
{
    (void)state;
    struct pipe_roots r;
    char err[SLUICE_ERRMSG_SIZE], path[1024], want[4096];
    const char *dirs[] = {root};
    assert_int_equal(pipe_roots_init(&r, dirs, 1, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/a.txt", root);
    int fd = pipe_roots_open_file(&r, PIPE_SRC_LINES, path, err, sizeof err);
    assert_true(fd >= 0);
    close(fd);
    snprintf(path, sizeof path, "%s/glob/x2.txt", root);
    assert_int_equal(pipe_roots_open_file(&r, PIPE_SRC_TFRECORD, path, err, sizeof err),
                     SLUICE_ERR_DENIED);
    snprintf(want, sizeof want, "tfrecord(\"%s\"): %s is outside the data roots (%s)", path, secret,
             root);
    assert_string_equal(err, want);
    snprintf(path, sizeof path, "%s/none.txt", root);
    assert_int_equal(pipe_roots_open_file(&r, PIPE_SRC_TAR, path, err, sizeof err), -ENOENT);
    snprintf(want, sizeof want, "%s: No such file or directory", path);
    assert_string_equal(err, want);
    /* Without roots, anything this process can read opens. */
    fd = pipe_roots_open_file(NULL, PIPE_SRC_LINES, secret, err, sizeof err);
    assert_true(fd >= 0);
    close(fd);
    pipe_roots_release(&r);
}

/* ---- A cluster confined on both sides ------------------------------------------------------- */

static const char *dispatcher_roots[] = {"--data-root", root_arg, NULL};
static const char *worker_confined[] = {"--data-root", root_arg, "--python-path", mods_arg, NULL};

static int start_cluster(void **state, bool dispatcher_confined)
{
    if (make_fixture() != 0)
        return -1;
    *state = cluster_new(dispatcher_confined ? dispatcher_roots : NULL, worker_confined, 0, 1);
    return *state ? 0 : -1;
}

static int both_setup(void **state)
{
    return start_cluster(state, true);
}

static int worker_only_setup(void **state)
{
    return start_cluster(state, false);
}

static int teardown(void **state)
{
    int rc = cluster_free(*state);
    tmp_cleanup();
    return rc;
}

/* Runs `sluice CMD PIPELINE [--mode MODE]` and asserts exit status 1 and the one error line
 * "sluice: CMD: " + want. */
static void cli_fails(struct cluster *c, const char *cmd, const char *pipeline, const char *mode,
                      const char *want)
{
    char *out = NULL, *err = NULL;
    int rc = mode ? cluster_cli(c, &out, &err, cmd, pipeline, "--mode", mode, NULL)
                  : cluster_cli(c, &out, &err, cmd, pipeline, NULL);
    char line[8192];
    snprintf(line, sizeof line, "sluice: %s: %s\n", cmd, want);
    if (rc != 1 || strcmp(err, line) != 0)
        fprintf(stderr, "%s %s: status %d, stderr: %s", cmd, pipeline, rc, err);
    assert_int_equal(rc, 1);
    assert_string_equal(err, line);
    free(out);
    free(err);
}

static void read_expect(struct cluster *c, const char *pipeline, const char *mode, const char *want)
{
    cluster_expect_read(c, want, pipeline, "--mode", mode, NULL);
}

/* source("GLOB"): RESOLVED is outside the data roots (ROOT) */
static void denial(char *buf, size_t len, const char *source, const char *glob,
                   const char *resolved)
{
    snprintf(buf, len, "%s(\"%s\"): %s is outside the data roots (%s)", source, glob, resolved,
             root);
}

static void test_inside_reads_exactly(void **state)
{
    struct cluster *c = *state;
    char p[1024];
    snprintf(p, sizeof p, "lines(\"%s/a.txt\")", root);
    read_expect(c, p, "distributed_epoch", "alpha\nbeta\n");
    read_expect(c, p, "parallel_epochs", "alpha\nbeta\n");
    snprintf(p, sizeof p, "lines(\"%s/inner/x1.txt\", \"%s/a.txt\")", root, root);
    read_expect(c, p, "parallel_epochs", "x1\nalpha\nbeta\n");
}

static void test_registration_refused(void **state)
{
    struct cluster *c = *state;
    char glob[1024], p[2048], want[4096];
    static const struct {
        const char *fmt; /* the glob, from ROOT (or ROOT2, ...) */
        int which;       /* 0: ROOT, 1: ROOT2, 2: absolute */
        const char *resolved_fmt;
    } cases[] = {
        {"/etc/passwd", 2, "/etc/passwd"}, {"%s/../secret.txt", 0, "secret"},
        {"%s/link.txt", 0, "secret"},      {"%s/glob/*", 0, "secret"},
        {"%s/c.txt", 1, "glob"},           {"%s/up/nothing*.txt", 0, "base"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *from = cases[i].which == 0 ? root : cases[i].which == 1 ? root2 : "";
        if (cases[i].which == 2)
            snprintf(glob, sizeof glob, "%s", cases[i].fmt);
        else
            text_format(glob, sizeof glob, cases[i].fmt, from);
        const char *resolved = strcmp(cases[i].resolved_fmt, "secret") == 0 ? secret
                               : strcmp(cases[i].resolved_fmt, "glob") == 0 ? glob
                               : strcmp(cases[i].resolved_fmt, "base") == 0 ? base
                                                                            : cases[i].resolved_fmt;
        snprintf(p, sizeof p, "lines(\"%s\")", glob);
        denial(want, sizeof want, "lines", glob, resolved);
        cli_fails(c, "register", p, NULL, want);
        /* A read registers first: refused the same way. */
        cli_fails(c, "read", p, "parallel_epochs", want);
    }
    /* Every file source is confined, also after a list of allowed globs. */
    snprintf(p, sizeof p, "tfrecord(\"%s/a.txt\", \"/etc/passwd\")", root);
    denial(want, sizeof want, "tfrecord", "/etc/passwd", "/etc/passwd");
    cli_fails(c, "register", p, NULL, want);
    snprintf(p, sizeof p, "tar(\"%s/link.txt\", \"txt\") | take(1)", root);
    snprintf(glob, sizeof glob, "%s/link.txt", root);
    denial(want, sizeof want, "tar", glob, secret);
    cli_fails(c, "register", p, NULL, want);
}

/* A file source whose path cannot be resolved at all is refused at once with the reason, not
 * retried as a dispatcher that cannot be reached would be (--timeout-ms bounds a retry). The
 * message is want, or begins with it when prefix (a long one is cut to the dispatcher's bound). */
static void register_refused_at_once(struct cluster *c, const char *pipeline, const char *want,
                                     bool prefix)
{
    char *out = NULL, *err = NULL;
    int rc = cluster_cli(c, &out, &err, "register", pipeline, "--timeout-ms", "20000", NULL);
    char line[8192];
    snprintf(line, sizeof line, "sluice: register: %s%s", want, prefix ? "" : "\n");
    bool same = prefix ? strncmp(err, line, strlen(line)) == 0 : strcmp(err, line) == 0;
    if (rc != 1 || !same)
        fprintf(stderr, "register %s: status %d, stderr: %s", pipeline, rc, err);
    assert_int_equal(rc, 1);
    assert_true(same);
    free(out);
    free(err);
}

static void test_unresolvable_refused_at_once(void **state)
{
    struct cluster *c = *state;
    register_refused_at_once(c, "lines(\"\")", "lines(\"\"): an empty path names no file", false);
    /* A name longer than a file name may be: the resolution's errno, refused all the same. */
    char path[1024], p[2048], want[2100];
    int n = snprintf(path, sizeof path, "%s/", root);
    memset(path + n, 'a', 300);
    path[n + 300] = '\0';
    snprintf(p, sizeof p, "lines(\"%s\")", path);
    snprintf(want, sizeof want, "%s: ", p);
    register_refused_at_once(c, p, want, true);
}

/* A link made after registration: the dispatcher checks again when it lists the files of a
 * distributed_epoch job, and the worker before it opens anything. */
static void test_checked_again_later(void **state)
{
    struct cluster *c = *state;
    char glob[1024], p[2048], want[4096], id[128], line[8192];
    snprintf(glob, sizeof glob, "%s/later.txt", root);
    snprintf(p, sizeof p, "lines(\"%s\")", glob);
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "register", p, NULL), 0);
    snprintf(id, sizeof id, "%.*s", (int)strcspn(out, "\n"), out);
    free(out);
    free(err);
    assert_int_equal(symlink(secret, glob), 0);
    denial(want, sizeof want, "lines", glob, secret);
    assert_int_equal(
        cluster_cli(c, &out, &err, "read", "--dataset-id", id, "--mode", "distributed_epoch", NULL),
        1);
    snprintf(line, sizeof line, "sluice: read: splitting dataset '%s': %s\n", id, want);
    assert_string_equal(err, line);
    free(out);
    free(err);
    cli_fails(c, "read", p, "parallel_epochs", want);
    assert_int_equal(unlink(glob), 0);
}

static void test_py_only_from_python_path(void **state)
{
    struct cluster *c = *state;
    read_expect(c, "range(4) | map(py, \"confmod:double\")", "distributed_epoch", "0\n2\n4\n6\n");
    cli_fails(c, "read", "range(1) | map(py, \"os:system\", \"touch /tmp/sluice-confine\")",
              "parallel_epochs",
              "map(py, \"os:system\"): module 'os' is not in the worker's --python-path");
    cli_fails(c, "read", "range(1) | filter(py, \"importlib:import_module\")", "distributed_epoch",
              "filter(py, \"importlib:import_module\"): module 'importlib' is not in the worker's "
              "--python-path");
}

/* ---- The worker's own check, behind a dispatcher without roots ------------------------------ */

static void test_worker_refuses(void **state)
{
    struct cluster *c = *state;
    char glob[1024], p[2048], want[4096];
    /* Registration passes (the dispatcher has no roots); the reader gets the worker's error. */
    snprintf(glob, sizeof glob, "%s/link.txt", root);
    snprintf(p, sizeof p, "lines(\"%s\")", glob);
    denial(want, sizeof want, "lines", glob, secret);
    char *out = NULL, *err = NULL;
    assert_int_equal(cluster_cli(c, &out, &err, "register", p, NULL), 0);
    free(out);
    free(err);
    /* Whole pipelines are checked before the worker lists or opens anything; distributed
     * splits as each file is opened. */
    cli_fails(c, "read", p, "parallel_epochs", want);
    cli_fails(c, "read", p, "distributed_epoch", want);
    denial(want, sizeof want, "lines", "/etc/passwd", "/etc/passwd");
    cli_fails(c, "read", "lines(\"/etc/passwd\")", "distributed_epoch", want);
    snprintf(glob, sizeof glob, "%s/glob/*", root);
    snprintf(p, sizeof p, "lines(\"%s\")", glob);
    denial(want, sizeof want, "lines", glob, secret);
    cli_fails(c, "read", p, "parallel_epochs", want);
    /* The split of the escaping file is refused when the worker comes to open it. */
    char split[1024];
    snprintf(split, sizeof split, "%s/glob/x2.txt", root);
    denial(want, sizeof want, "lines", split, secret);
    cli_fails(c, "read", p, "distributed_epoch", want);
    snprintf(p, sizeof p, "tar(\"%s/link.txt\", \"txt\")", root);
    snprintf(glob, sizeof glob, "%s/link.txt", root);
    denial(want, sizeof want, "tar", glob, secret);
    cli_fails(c, "read", p, "distributed_epoch", want);
    /* What is inside still reads. */
    snprintf(p, sizeof p, "lines(\"%s/a.txt\")", root);
    read_expect(c, p, "distributed_epoch", "alpha\nbeta\n");
}

static void test_missing_root_is_a_start_error(void **state)
{
    (void)state;
    char missing[1024];
    snprintf(missing, sizeof missing, "%s/nowhere", base);
    char *const wargv[] = {(char *)bin_path("sluice-worker"),
                           "--dispatcher",
                           "127.0.0.1:1",
                           "--data-root",
                           missing,
                           NULL};
    char *out = NULL, *err = NULL, want[2048];
    assert_int_equal(run_cmd(wargv, WAIT_MS, &out, &err), 1);
    snprintf(want, sizeof want, "sluice-worker: data root %s: No such file or directory\n",
             missing);
    assert_string_equal(err, want);
    free(out);
    free(err);
    char *const dargv[] = {
        (char *)bin_path("sluice-dispatcher"), "--port", "0", "--data-root", missing, NULL};
    assert_int_equal(run_cmd(dargv, WAIT_MS, &out, &err), 1);
    snprintf(want, sizeof want, "sluice-dispatcher: data root %s: No such file or directory\n",
             missing);
    assert_string_equal(err, want);
    free(out);
    free(err);
}

int main(void)
{
    const struct CMUnitTest fs[] = {
        cmocka_unit_test(test_roots_init),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_check_source),
        cmocka_unit_test(test_open_file),
        cmocka_unit_test(test_missing_root_is_a_start_error),
    };
    const struct CMUnitTest both[] = {
        cmocka_unit_test(test_inside_reads_exactly),
        cmocka_unit_test(test_registration_refused),
        cmocka_unit_test(test_unresolvable_refused_at_once),
        cmocka_unit_test(test_checked_again_later),
#ifdef SLUICE_WORKER_HAS_PYTHON
        cmocka_unit_test(test_py_only_from_python_path),
#endif
    };
    const struct CMUnitTest worker_only[] = {
        cmocka_unit_test(test_worker_refuses),
    };
    int failed = cmocka_run_group_tests_name("roots", fs, fs_setup, tmp_teardown);
    failed += cmocka_run_group_tests_name("confined", both, both_setup, teardown);
    failed += cmocka_run_group_tests_name("worker_only", worker_only, worker_only_setup, teardown);
    return failed;
}
