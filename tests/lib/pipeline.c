#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/pipeline.h"

#include "pipeline/format.h"
#include "pipeline/open.h"
#include "pipeline/parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pipe_spec *pipeline_parse(const char *text)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct pipe_spec *spec = NULL;
    int rc = pipe_parse(text, &spec, err, sizeof err);
    if (rc != 0)
        fail_msg("parse '%s': %d %s", text, rc, err);
    assert_non_null(spec);
    return spec;
}

char *pipeline_text(struct pipe_run *run, int *rc)
{
    struct sluice_element e;
    pipe_elem_init(&e);
    char *out = strdup("");
    assert_non_null(out);
    int r;
    while ((r = pipe_run_next(run, &e)) == 1) {
        struct pipe_buf b = {0};
        assert_int_equal(pipe_format_elem(&b, &e), 0);
        size_t n = strlen(out);
        out = realloc(out, n + b.len + 2);
        assert_non_null(out);
        memcpy(out + n, b.p, b.len);
        out[n + b.len] = '\n';
        out[n + b.len + 1] = '\0';
        pipe_buf_release(&b);
    }
    if (r < 0) {
        size_t n = strlen(out), more = strlen(run->ctx.err) + 5;
        out = realloc(out, n + more);
        assert_non_null(out);
        snprintf(out + n, more, "ERR %s", run->ctx.err);
    }
    pipe_elem_release(&e);
    if (rc)
        *rc = r;
    return out;
}
