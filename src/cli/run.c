/* sluice run: builds a pipeline locally and prints its elements. No service involved. */
#include "cli.h"

#include "common/error.h"
#include "pipeline/format.h"
#include "pipeline/objstore.h"
#include "pipeline/open.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char run_usage[] =
    "usage: sluice run PIPELINE [--format text|count] [--limit N] [--plugin LIB.so]...\n"
    "                  [--object-retry-ms N] [--object-range-bytes N]\n"
    "\n"
    "Runs PIPELINE on this machine and prints one element per line (--format text, the\n"
    "default) or only the number of elements (--format count). --limit N stops after N\n"
    "elements. --plugin loads a shared object that adds functions (repeatable).\n"
    "--object-retry-ms N retries an object-store request (s3://, https://) that fails\n"
    "transiently for up to N ms (default 60000); --object-range-bytes N reads objects in\n"
    "ranged GETs of N bytes (4096 to 1073741824; default 8388608).\n"
    "\n"
    "example: sluice run 'range(10) | map(square) | batch(4)'\n";

#define MAX_PLUGINS 16

int cli_run(int argc, char **argv)
{
    const char *text = NULL;
    bool count_only = false;
    unsigned long long limit = 0;
    bool has_limit = false;
    const char *plugins[MAX_PLUGINS];
    size_t nplugins = 0;
    uint32_t retry_ms = 0, range_bytes = 0; /* 0: the environment's, else the defaults */

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(run_usage, stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(a, "--format") == 0 && i + 1 < argc) {
            const char *f = argv[++i];
            if (strcmp(f, "text") == 0) {
                count_only = false;
            } else if (strcmp(f, "count") == 0) {
                count_only = true;
            } else {
                cli_error("usage", "--format takes text or count, not '%s'", f);
                return CLI_EXIT_USAGE;
            }
        } else if (strcmp(a, "--limit") == 0 && i + 1 < argc) {
            if (cli_parse_u64(argv[++i], &limit) != 0) {
                cli_error("usage", "--limit takes a non-negative integer, not '%s'", argv[i]);
                return CLI_EXIT_USAGE;
            }
            has_limit = true;
        } else if ((strcmp(a, "--object-retry-ms") == 0 ||
                    strcmp(a, "--object-range-bytes") == 0) &&
                   i + 1 < argc) {
            bool retry = strcmp(a, "--object-retry-ms") == 0;
            unsigned long long v, lo = retry ? 1 : OBJ_MIN_RANGE_BYTES,
                                  hi = retry ? OBJ_MAX_RETRY_MS : OBJ_MAX_RANGE_BYTES;
            if (cli_parse_u64(argv[++i], &v) != 0 || v < lo || v > hi) {
                cli_error("usage", "%s takes a number from %llu to %llu, not '%s'", a, lo, hi,
                          argv[i]);
                return CLI_EXIT_USAGE;
            }
            if (retry)
                retry_ms = (uint32_t)v;
            else
                range_bytes = (uint32_t)v;
        } else if (strcmp(a, "--plugin") == 0 && i + 1 < argc) {
            if (nplugins == MAX_PLUGINS) {
                cli_error("usage", "at most %d --plugin options", MAX_PLUGINS);
                return CLI_EXIT_USAGE;
            }
            plugins[nplugins++] = argv[++i];
        } else if (a[0] == '-' && a[1] == '-') {
            cli_error("usage", "unknown or incomplete option '%s' (try 'sluice run --help')", a);
            return CLI_EXIT_USAGE;
        } else if (!text) {
            text = a;
        } else {
            cli_error("usage", "one PIPELINE expected; unexpected '%s'", a);
            return CLI_EXIT_USAGE;
        }
    }
    if (!text) {
        fputs(run_usage, stderr);
        return CLI_EXIT_USAGE;
    }
    obj_configure(retry_ms, range_bytes);

    int status = CLI_EXIT_FAIL;
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_registry *reg = NULL;
    struct pipe_spec *spec = NULL;
    struct pipe_run *run = NULL;
    struct sluice_element elem;
    struct pipe_buf out = {0};
    pipe_elem_init(&elem);

    int rc = pipe_registry_new(&reg);
    if (rc) {
        cli_error("registry", "%s", sluice_strerror(rc));
        goto done;
    }
    for (size_t i = 0; i < nplugins; i++) {
        rc = pipe_registry_load_plugin(reg, plugins[i], err, sizeof(err));
        if (rc) {
            cli_error("plugin", "%s", err);
            status = CLI_EXIT_USAGE;
            goto done;
        }
    }
    rc = pipe_parse(text, &spec, err, sizeof(err));
    if (rc == 0)
        rc = pipe_registry_check(reg, spec, err, sizeof(err));
    if (rc) {
        cli_error("pipeline", "%s", err);
        status = rc == SLUICE_ERR_NOMEM ? CLI_EXIT_FAIL : CLI_EXIT_USAGE;
        goto done;
    }
    rc = pipe_open(spec, reg, &run, err, sizeof(err));
    if (rc) {
        cli_error("open", "%s", err[0] ? err : sluice_strerror(rc));
        goto done;
    }

    unsigned long long n = 0;
    static char iobuf[1 << 16];
    setvbuf(stdout, iobuf, _IOFBF, sizeof(iobuf));
    while (!has_limit || n < limit) {
        rc = pipe_run_next(run, &elem);
        if (rc < 0) {
            cli_error("run", "%s", run->ctx.err[0] ? run->ctx.err : sluice_strerror(rc));
            goto done;
        }
        if (rc == 0)
            break;
        n++;
        if (!count_only) {
            out.len = 0;
            if (pipe_format_elem(&out, &elem) != 0) {
                cli_error("run", "%s", sluice_strerror(SLUICE_ERR_NOMEM));
                goto done;
            }
            fwrite(out.p, 1, out.len, stdout);
            fputc('\n', stdout);
        }
    }
    if (count_only)
        printf("%llu\n", n);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("output", "write to standard output failed");
        goto done;
    }
    status = CLI_EXIT_OK;
done:
    pipe_buf_release(&out);
    pipe_elem_release(&elem);
    pipe_run_free(run);
    pipe_spec_free(spec);
    pipe_registry_free(reg);
    return status;
}
