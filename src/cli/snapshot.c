/* sluice snapshot save|status (docs/snapshots.md): starts a save of a registered dataset into a
 * snapshot directory and waits until it is over (unless --no-wait), or prints where a save
 * stands. The dispatcher journals the save; a command that was interrupted (or a dispatcher that
 * restarted) is simply run again: the same dataset and path is the same save. */
#include "cli.h"
#include "wait.h"

#include "common/error.h"
#include "sluice/sluice.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How often a waiting save asks where the save stands. */
#define SNAPSHOT_POLL_MS 200

static const char snapshot_usage[] =
    "usage: sluice snapshot save --dispatcher H:P --dataset-id ID --path DIR [--no-wait]\n"
    "                            [--timeout-ms N] [security options]\n"
    "       sluice snapshot status --dispatcher H:P --path DIR [--json] [--timeout-ms N]\n"
    "                            [security options]\n"
    "\n"
    "save: the workers write the dataset's elements once, in parallel, into chunk files under\n"
    "DIR (DIR/chunks/chunk-NNNNNNNNNNNN, one per split), with DIR/snapshot.json, and once every\n"
    "chunk is in place DIR/manifest.json with each chunk's checksum. DIR must be absolute and be\n"
    "the same directory on the dispatcher, every worker and every reader (a shared file\n"
    "system), or be an s3://BUCKET/PREFIX URL: the workers put each chunk object whole, and\n"
    "snapshot.json and manifest.json are put last, once every chunk is there. Waits until the\n"
    "save is over and prints 'snapshot DIR: finished, N chunks' (exit 0); a save that fails\n"
    "exits 1 with its reason. The save is journaled: it survives\n"
    "dispatcher and worker restarts and goes on from the chunks already committed, and running\n"
    "the command again waits for the same save (or starts a failed one again, writing every\n"
    "chunk anew). The pipeline must be splittable and finite.\n"
    "Read the snapshot with the pipeline snapshot(\"DIR\"), also while it is being saved (an\n"
    "s3:// one once it is finished).\n"
    "\n"
    "status: prints 'snapshot DIR: running, C of N chunks committed', '...: finished, N chunks'\n"
    "or '...: failed: REASON'; with --json one object with path, save_id, dataset_id, state,\n"
    "chunks, chunks_committed and error.\n"
    "\n"
    "  --no-wait         return once the save has started (DIR/snapshot.json written)\n"
    "  --timeout-ms N    give up after N ms: waiting for the dispatcher, and (save) for the\n"
    "                    save to finish; exit 1. Default 0: no limit.\n" CLI_DISPATCHER_USAGE
        CLI_SECURITY_USAGE;

struct snap_args {
    const char *dispatcher, *dataset_id, *path;
    bool no_wait, as_json;
    unsigned long long timeout_ms;
    struct sluice_security_options security;
};

/* Returns -1 to go on, else the exit status. */
static int parse(int argc, char **argv, bool save, struct snap_args *a)
{
    int k;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            fputs(snapshot_usage, stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(s, "--dispatcher") == 0 && i + 1 < argc) {
            a->dispatcher = argv[++i];
        } else if (save && strcmp(s, "--dataset-id") == 0 && i + 1 < argc) {
            a->dataset_id = argv[++i];
        } else if (strcmp(s, "--path") == 0 && i + 1 < argc) {
            a->path = argv[++i];
        } else if (save && strcmp(s, "--no-wait") == 0) {
            a->no_wait = true;
        } else if (!save && strcmp(s, "--json") == 0) {
            a->as_json = true;
        } else if (strcmp(s, "--timeout-ms") == 0 && i + 1 < argc) {
            if (cli_parse_u64(argv[++i], &a->timeout_ms) != 0 || a->timeout_ms > UINT32_MAX) {
                cli_error("usage", "--timeout-ms takes a number of milliseconds, not '%s'",
                          argv[i]);
                return CLI_EXIT_USAGE;
            }
        } else if ((k = cli_parse_security(argc, argv, &i, &a->security)) != 0) {
            if (k < 0)
                return CLI_EXIT_USAGE;
        } else if (s[0] == '-' && s[1] == '-') {
            cli_error("usage", "unknown or incomplete option '%s' (try 'sluice snapshot --help')",
                      s);
            return CLI_EXIT_USAGE;
        } else {
            cli_error("usage", "unexpected argument '%s' (try 'sluice snapshot --help')", s);
            return CLI_EXIT_USAGE;
        }
    }
    if (!a->dispatcher || !a->path || (save && !a->dataset_id)) {
        cli_error("usage",
                  "--dispatcher H:P, %s--path DIR are required (try 'sluice snapshot "
                  "--help')",
                  save ? "--dataset-id ID and " : "");
        return CLI_EXIT_USAGE;
    }
    return -1;
}

static void print_line(const char *path, const struct sluice_snapshot_status *st)
{
    if (strcmp(st->state, "finished") == 0)
        printf("snapshot %s: finished, %" PRIu64 " chunks\n", path, st->chunks);
    else if (strcmp(st->state, "failed") == 0)
        printf("snapshot %s: failed: %s\n", path, st->error);
    else
        printf("snapshot %s: %s, %" PRIu64 " of %" PRIu64 " chunks committed\n", path, st->state,
               st->chunks_committed, st->chunks);
}

static int flush_stdout(void)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("output", "write to standard output failed");
        return CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}

static int do_save(struct sluice_client *client, const struct snap_args *a)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_snapshot_status st;
    struct cli_wait wait;
    cli_wait_start(&wait, client, (uint32_t)a->timeout_ms);
    int rc = sluice_client_save_snapshot(client, a->dataset_id, a->path, &st, err, sizeof err);
    cli_wait_stop(&wait);
    if (rc < 0) {
        cli_wait_error(&wait, "snapshot save", rc, err);
        return CLI_EXIT_FAIL;
    }
    if (strcmp(st.state, "failed") == 0) {
        cli_error("snapshot save", "%s", st.error[0] ? st.error : "the save failed");
        return CLI_EXIT_FAIL;
    }
    if (a->no_wait) {
        printf("snapshot %s: %s, %" PRIu64 " chunks (save %" PRIu64 ")\n", a->path, st.state,
               st.chunks, st.save_id);
        return flush_stdout();
    }
    /* Polls the save's status; each request is watched on its own, so a dispatcher out of
     * reach (restarting) is reported while the save itself is simply waited for. */
    uint64_t start = cli_now_ms();
    for (;;) {
        cli_wait_start(&wait, client, (uint32_t)a->timeout_ms);
        rc = sluice_client_snapshot_status(client, a->path, &st, err, sizeof err);
        cli_wait_stop(&wait);
        if (rc < 0) {
            cli_wait_error(&wait, "snapshot save", rc, err);
            return CLI_EXIT_FAIL;
        }
        if (strcmp(st.state, "failed") == 0) {
            cli_error("snapshot save", "%s", st.error[0] ? st.error : "the save failed");
            return CLI_EXIT_FAIL;
        }
        if (strcmp(st.state, "finished") == 0)
            break;
        uint64_t waited = cli_now_ms() - start;
        if (a->timeout_ms && waited >= a->timeout_ms) {
            cli_error("snapshot save",
                      "snapshot %s: still running after %" PRIu64 " ms (%" PRIu64 " of %" PRIu64
                      " chunks committed)",
                      a->path, waited, st.chunks_committed, st.chunks);
            return CLI_EXIT_FAIL;
        }
        uint64_t nap = SNAPSHOT_POLL_MS;
        if (a->timeout_ms && a->timeout_ms - waited < nap)
            nap = a->timeout_ms - waited;
        struct timespec ts = {(time_t)(nap / 1000u), (long)(nap % 1000u) * 1000000L};
        nanosleep(&ts, NULL);
    }
    print_line(a->path, &st);
    return flush_stdout();
}

static int do_status(struct sluice_client *client, const struct snap_args *a)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_snapshot_status st;
    struct cli_wait wait;
    cli_wait_start(&wait, client, (uint32_t)a->timeout_ms);
    int rc = sluice_client_snapshot_status(client, a->path, &st, err, sizeof err);
    cli_wait_stop(&wait);
    if (rc < 0) {
        cli_wait_error(&wait, "snapshot status", rc, err);
        return CLI_EXIT_FAIL;
    }
    if (!a->as_json) {
        print_line(a->path, &st);
        return flush_stdout();
    }
    json_t *o = json_pack("{s:s,s:I,s:s,s:s,s:I,s:I,s:s}", "path", a->path, "save_id",
                          (json_int_t)st.save_id, "dataset_id", st.dataset_id, "state", st.state,
                          "chunks", (json_int_t)st.chunks, "chunks_committed",
                          (json_int_t)st.chunks_committed, "error", st.error);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text) {
        cli_error("snapshot status", "%s", sluice_strerror(SLUICE_ERR_NOMEM));
        return CLI_EXIT_FAIL;
    }
    puts(text);
    free(text);
    return flush_stdout();
}

/* The subcommand: the first argument that is not an option or an option's value ("save" or
 * "status"), so that `sluice snapshot --dispatcher H:P save ...` works as well. Returns its index
 * or 0. */
static int find_command(int argc, char **argv)
{
    static const char *const with_value[] = {"--dispatcher", "--dataset-id",      "--path",
                                             "--timeout-ms", "--auth-token-file", "--tls-cert",
                                             "--tls-key",    "--tls-ca",          NULL};
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] != '-')
            return i;
        for (int k = 0; with_value[k]; k++) {
            if (strcmp(argv[i], with_value[k]) == 0) {
                i++;
                break;
            }
        }
    }
    return 0;
}

int cli_snapshot(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(snapshot_usage, stdout);
            return CLI_EXIT_OK;
        }
    }
    int at = find_command(argc, argv);
    if (at == 0) {
        cli_error("usage", "sluice snapshot save|status (try 'sluice snapshot --help')");
        return CLI_EXIT_USAGE;
    }
    bool save = strcmp(argv[at], "save") == 0;
    if (!save && strcmp(argv[at], "status") != 0) {
        cli_error("usage", "unknown snapshot command '%s' (try 'sluice snapshot --help')",
                  argv[at]);
        return CLI_EXIT_USAGE;
    }
    /* The options, without the subcommand. */
    char *args[64];
    int n = 0;
    for (int i = 0; i < argc && n < 63; i++) {
        if (i != at)
            args[n++] = argv[i];
    }
    args[n] = NULL;
    struct snap_args a = {.timeout_ms = CLI_DEFAULT_TIMEOUT_MS};
    int status = parse(n, args, save, &a);
    if (status >= 0)
        return status;
    struct sluice_client *client = NULL;
    status = cli_open_client(a.dispatcher, (uint32_t)a.timeout_ms, NULL, 0, &a.security, &client);
    if (status != CLI_EXIT_OK)
        return status;
    status = save ? do_save(client, &a) : do_status(client, &a);
    sluice_client_close(client);
    return status;
}
