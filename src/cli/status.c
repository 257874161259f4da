/* sluice status: prints the dispatcher's status document, as JSON or as tables; with --watch,
 * again every --interval-ms until SIGINT or SIGTERM (exit 0) or until a refresh fails, that is
 * until the dispatcher has been unreachable for longer than --timeout-ms (exit 1). On a terminal
 * each refresh replaces the previous one (cursor home, clear screen); otherwise the refreshes
 * follow each other separated by a blank line. */
#include "cli.h"
#include "wait.h"

#include "client/status_json.h"
#include "common/error.h"
#include "sluice/sluice.h"

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STATUS_DEFAULT_INTERVAL_MS 2000
/* How often a sleeping --watch looks at whether it was told to stop. */
#define WATCH_POLL_MS 50

static const char status_usage[] =
    "usage: sluice status --dispatcher H:P [--json] [--timeout-ms N] [--watch [--interval-ms N]]\n"
    "                     [--dataset ID | --why JOB]\n"
    "                     [--auth-token-file F] [--tls-ca F [--tls-cert F --tls-key F]]\n"
    "\n"
    "Prints the dispatcher's workers (address, incarnation, tasks, draining, buffered\n"
    "elements and MB, elements/s and MB/s served, heartbeat age), datasets (id, pipeline)\n"
    "and jobs (id, name, dataset, mode, state, clients, tasks, workers, splits finished/total,\n"
    "splits leased, copies of hedged splits once any job made one, elements/s and MB/s\n"
    "served), once a snapshot was saved the saves\n"
    "(id, dataset, path, state, chunks, chunks committed), and once a named mix job was read\n"
    "its weights (job, dataset, weights in force, from which position, horizon, shares drawn),\n"
    "and the consumers of the jobs (job, client id, seconds their caller spent blocked waiting\n"
    "for elements, the share of the last minute it waited, elements/s consumed) as tables,\n"
    "or with --json the dispatcher's status document as it is (one JSON object). Rates are\n"
    "over the dispatcher's window (--autoscale-window-ms). An unreachable dispatcher is\n"
    "retried (see --timeout-ms). The document carries each pipeline's first 256 bytes, its\n"
    "length and its SHA-256.\n"
    "\n"
    "  --dataset ID     print that dataset's whole pipeline text (with --json, its entry)\n"
    "  --why JOB        say why job JOB (an id, or a name: its newest job) waits, in one\n"
    "                   paragraph: whether it is input-bound (its trainers spent 10 % or more\n"
    "                   of the last minute blocked waiting for elements), its slowest consumer,\n"
    "                   its slowest worker against the median of its workers, and the stage\n"
    "                   its time goes to (with --json, the job's \"why\" object)\n"
    "  --watch          print again every --interval-ms (default 2000) until Ctrl-C (exit 0),\n"
    "                   in place on a terminal; exit 1 once the dispatcher has been\n"
    "                   unreachable for longer than --timeout-ms\n"
    "\n" CLI_TIMEOUT_USAGE CLI_DISPATCHER_USAGE CLI_SECURITY_USAGE;

static volatile sig_atomic_t watch_stop;

static void on_watch_signal(int sig)
{
    (void)sig;
    watch_stop = 1;
}

/* Sleeps ms milliseconds, or less when told to stop. */
static void watch_sleep(unsigned long long ms)
{
    while (ms > 0 && !watch_stop) {
        unsigned long long step = ms < WATCH_POLL_MS ? ms : WATCH_POLL_MS;
        struct timespec ts = {(time_t)(step / 1000), (long)(step % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        ms -= step;
    }
}

/* The pipeline text of the one dataset in json (from sluice_status_dataset), with a newline, into
 * *out (malloc'd). */
static int pipeline_of(const char *json, char **out, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_loads(json, 0, &jerr);
    json_t *ds = root ? json_array_get(json_object_get(root, "datasets"), 0) : NULL;
    const char *text = ds ? json_string_value(json_object_get(ds, "pipeline")) : NULL;
    int rc = 0;
    if (text == NULL)
        rc = err_set(err, errlen, SLUICE_ERR_PROTOCOL, "the dispatcher's reply has no pipeline");
    else if ((*out = malloc(strlen(text) + 2)) == NULL)
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    else
        sprintf(*out, "%s\n", text);
    json_decref(root);
    return rc;
}

/* Fetches the document once and writes it (as JSON or tables) to stdout, preceded by what
 * separates it from the previous refresh of a --watch (refresh > 0). Returns an exit status. */
static int show_once(struct sluice_client *client, bool as_json, const char *dataset,
                     const char *why, unsigned refresh, bool watch, bool tty,
                     const char *dispatcher, unsigned long long interval_ms,
                     unsigned long long timeout_ms)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    char *json = NULL, *table = NULL;
    int status = CLI_EXIT_OK;
    /* What holds the request up is said after 2 s, and a timeout names it. */
    struct cli_wait wait;
    cli_wait_start(&wait, client, (uint32_t)timeout_ms);
    int rc = dataset ? sluice_status_dataset(client, dataset, &json, err, sizeof(err))
                     : sluice_status(client, &json, err, sizeof(err));
    cli_wait_stop(&wait);
    if (rc) {
        cli_wait_error(&wait, "status", rc, err);
        return CLI_EXIT_FAIL;
    }
    if (!as_json && dataset && (rc = pipeline_of(json, &table, err, sizeof(err))) != 0) {
        cli_error("status", "%s", err);
        status = CLI_EXIT_FAIL;
        goto done;
    }
    if (why && (rc = status_json_why(json, why, as_json, &table, err, sizeof(err))) != 0) {
        cli_error("status", "%s", err);
        status = CLI_EXIT_FAIL;
        goto done;
    }
    if (!as_json && !dataset && !why &&
        (rc = status_json_table(json, &table, err, sizeof(err))) != 0) {
        cli_error("status", "%s", err);
        status = CLI_EXIT_FAIL;
        goto done;
    }
    if (watch && tty) {
        /* Cursor home and clear the screen: the refresh replaces the last one. */
        time_t now = time(NULL);
        struct tm tm;
        char when[32] = "";
        if (localtime_r(&now, &tm))
            strftime(when, sizeof when, "%H:%M:%S", &tm);
        printf("\x1b[H\x1b[2J%s  every %llu ms  %s  (Ctrl-C stops)\n\n", dispatcher, interval_ms,
               when);
    } else if (refresh > 0) {
        fputc('\n', stdout);
    }
    if (why && as_json) {
        fputs(table, stdout);
        fputc('\n', stdout);
    } else if (as_json) {
        size_t len = strlen(json);
        fputs(json, stdout);
        if (len == 0 || json[len - 1] != '\n')
            fputc('\n', stdout);
    } else {
        fputs(table, stdout);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("output", "write to standard output failed");
        status = CLI_EXIT_FAIL;
    }
done:
    free(table);
    free(json);
    return status;
}

int cli_status(int argc, char **argv)
{
    const char *dispatcher = NULL, *dataset = NULL, *why = NULL;
    bool as_json = false, watch = false;
    unsigned long long timeout_ms = CLI_DEFAULT_TIMEOUT_MS;
    unsigned long long interval_ms = STATUS_DEFAULT_INTERVAL_MS;

    struct sluice_security_options security = {0};
    int k;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(status_usage, stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(a, "--dispatcher") == 0 && i + 1 < argc) {
            dispatcher = argv[++i];
        } else if (strcmp(a, "--json") == 0) {
            as_json = true;
        } else if (strcmp(a, "--dataset") == 0 && i + 1 < argc) {
            dataset = argv[++i];
            if (dataset[0] == '\0') {
                cli_error("usage", "--dataset takes a dataset id, not ''");
                return CLI_EXIT_USAGE;
            }
        } else if (strcmp(a, "--why") == 0 && i + 1 < argc) {
            why = argv[++i];
            if (why[0] == '\0') {
                cli_error("usage", "--why takes a job id or name, not ''");
                return CLI_EXIT_USAGE;
            }
        } else if (strcmp(a, "--watch") == 0) {
            watch = true;
        } else if (strcmp(a, "--interval-ms") == 0 && i + 1 < argc) {
            if (cli_parse_u64(argv[++i], &interval_ms) != 0 || interval_ms == 0 ||
                interval_ms > UINT32_MAX) {
                cli_error("usage",
                          "--interval-ms takes a positive number of milliseconds, not '%s'",
                          argv[i]);
                return CLI_EXIT_USAGE;
            }
        } else if (strcmp(a, "--timeout-ms") == 0 && i + 1 < argc) {
            if (cli_parse_u64(argv[++i], &timeout_ms) != 0 || timeout_ms > UINT32_MAX) {
                cli_error("usage", "--timeout-ms takes a number of milliseconds, not '%s'",
                          argv[i]);
                return CLI_EXIT_USAGE;
            }
        } else if ((k = cli_parse_security(argc, argv, &i, &security)) != 0) {
            if (k < 0)
                return CLI_EXIT_USAGE;
        } else if (a[0] == '-' && a[1] == '-') {
            cli_error("usage", "unknown or incomplete option '%s' (try 'sluice status --help')", a);
            return CLI_EXIT_USAGE;
        } else {
            cli_error("usage", "unexpected argument '%s' (try 'sluice status --help')", a);
            return CLI_EXIT_USAGE;
        }
    }
    if (!dispatcher) {
        cli_error("usage", "--dispatcher H:P is required (try 'sluice status --help')");
        return CLI_EXIT_USAGE;
    }
    if (why && dataset) {
        cli_error("usage", "--why and --dataset do not go together (try 'sluice status --help')");
        return CLI_EXIT_USAGE;
    }

    struct sluice_client *client = NULL;
    int status = cli_open_client(dispatcher, (uint32_t)timeout_ms, NULL, 0, &security, &client);
    if (status != CLI_EXIT_OK)
        return status;

    if (!watch) {
        status = show_once(client, as_json, dataset, why, 0, false, false, dispatcher, interval_ms,
                           timeout_ms);
        sluice_client_close(client);
        return status;
    }

    /* --watch: each refresh is one status request, bounded by the client's timeout; a signal
     * ends the loop between refreshes. */
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_watch_signal;
    sigemptyset(&sa.sa_mask);
    watch_stop = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    bool tty = isatty(STDOUT_FILENO);
    for (unsigned refresh = 0; !watch_stop; refresh++) {
        status = show_once(client, as_json, dataset, why, refresh, true, tty, dispatcher,
                           interval_ms, timeout_ms);
        if (status != CLI_EXIT_OK)
            break;
        watch_sleep(interval_ms);
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sluice_client_close(client);
    return status;
}
