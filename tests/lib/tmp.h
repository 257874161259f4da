/* Temporary directories for tests: one per test program, made on first use and removed at its
 * end, and a recursive remove for the directories a test makes itself. */
#ifndef SLUICE_TESTS_LIB_TMP_H
#define SLUICE_TESTS_LIB_TMP_H

/* A directory made for this test program (/tmp/sluice-test-XXXXXX) on the first call, the same
 * one afterwards until tmp_cleanup. Aborts when it cannot be made. */
const char *tmp_dir(void);

/* Removes tmp_dir() and everything in it, if it was made; the next tmp_dir() makes a new one. */
void tmp_cleanup(void);

/* tmp_cleanup as a cmocka group teardown: cmocka_run_group_tests(tests, NULL, tmp_teardown). */
int tmp_teardown(void **unused);

/* Removes path and everything under it, as `rm -rf` does (symbolic links are removed, never
 * followed). Returns 0, or -1 when something could not be removed (a missing path is not an
 * error). */
int tmp_remove(const char *path);

#endif
