#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/journal_raw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void journal_raw_open(struct journal_raw *r, const char *wd, const char *table)
{
    size_t n = strlen(wd) + sizeof "/journal";
    char *path = malloc(n);
    assert_non_null(path);
    snprintf(path, n, "%s/journal", wd);
    assert_int_equal(mdb_env_create(&r->env), 0);
    assert_int_equal(mdb_env_set_maxdbs(r->env, 4), 0);
    assert_int_equal(mdb_env_open(r->env, path, MDB_NOTLS, 0644), 0);
    free(path);
    assert_int_equal(mdb_txn_begin(r->env, NULL, 0, &r->txn), 0);
    assert_int_equal(mdb_dbi_open(r->txn, table, 0, &r->dbi), 0);
}

void journal_raw_close(struct journal_raw *r)
{
    if (r->txn)
        assert_int_equal(mdb_txn_commit(r->txn), 0);
    r->txn = NULL;
    mdb_env_close(r->env);
    r->env = NULL;
}
