/* sluice-dispatcher: parses the command line (docs/design.md §2), starts the embeddable dispatcher
 * (include/sluice/server.h), prints the "listening on" line and serves until SIGTERM or SIGINT
 * (or a failure), then stops it. Exit status: 0 after a clean stop, 1 on a runtime failure, 2 on
 * bad usage. */
#include "sluice/server.h"
#include "sluice/sluice.h"

#include "common/error.h"
#include "common/labels.h"
#include "common/log.h"
#include "common/rpc.h"
#include "common/security.h"
#include "common/signals.h"
#include "pipeline/objstore.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

#define PROG "sluice-dispatcher"
#define EXIT_USAGE 2
#define EXIT_RUNTIME 1

static const char usage[] =
    "usage: sluice-dispatcher [--host H] [--port P] [--work-dir DIR] [--fault-tolerant]\n"
    "                         [--snapshot-every N] [--journal-max-mb N] [--recover-to-last-good]\n"
    "                         [--worker-timeout-ms N] [--client-timeout-ms N]\n"
    "                         [--disconnect-grace-ms N]\n"
    "                         [--job-gc-timeout-ms N] [--worker-addresses H:P,...]\n"
    "                         [--metrics-port P] [--autoscale-window-ms N] [--log-level L]\n"
    "                         [--data-root DIR]...\n"
    "                         [--max-datasets N] [--max-pipeline-bytes N]\n"
    "                         [--max-jobs-per-client N] [--max-jobs-per-address N]\n"
    "                         [--auth-token-file F] [--tls-cert F --tls-key F] [--tls-ca F]\n"
    "                         [--insecure] [--metrics-host H] [--handshake-timeout-ms N]\n"
    "                         [--max-connections N] [--max-handshakes N]\n"
    "                         [--raft-id N --raft-address H:P --raft-cluster LIST]\n"
    "                         [--raft-bind H:P] [--advertise H:P]\n"
    "                         [--raft-election-timeout-ms N] [--raft-seed-journal DIR]\n"
    "\n"
    "Keeps the state of a sluice cluster and hands its work to the workers: registers workers\n"
    "and datasets, starts jobs, assigns tasks and splits, and tells readers where to fetch\n"
    "their elements.\n"
    "\n"
    "  --host H                 address to listen on (default 127.0.0.1; 0.0.0.0 for all)\n"
    "  --port P                 port to listen on (default 5050; 0 picks a free one)\n"
    "  --work-dir DIR           where the journal lives (fault-tolerant mode)\n"
    "  --fault-tolerant         journal every change so a restart loses nothing\n"
    "                           (needs --work-dir)\n"
    "  --snapshot-every N       snapshot the state every N changes, so a restart replays\n"
    "                           at most N (default: at least 10000, and not before the\n"
    "                           changes since the last snapshot take twice its size)\n"
    "  --journal-max-mb N       the most the journal may grow to, in MiB (default 16384)\n"
    "  --recover-to-last-good   when only the tail of the journal's log is damaged, start from\n"
    "                           the snapshot and the records before the damage, dropping the\n"
    "                           rest (logged; a copy of the damaged journal is kept). Without\n"
    "                           it a damaged journal is always refused\n"
    "  --worker-timeout-ms N    remove a worker silent this long (default 10000)\n"
    "  --client-timeout-ms N    release a client silent this long (default 30000)\n"
    "  --disconnect-grace-ms N  release a client (remove a worker) this long after its\n"
    "                           connection closed, when it sent no heartbeat since (default\n"
    "                           5000, at most its timeout; 0: only the timeouts)\n"
    "  --job-gc-timeout-ms N    collect an iteration without clients this long (default 60000)\n"
    "  --worker-addresses LIST  the fixed workers of static sharding, comma-separated\n"
    "  --metrics-port P         serve Prometheus metrics at GET /metrics, and the web\n"
    "                           dashboard at /, on this port (0 picks a free one); with a\n"
    "                           token, scrapes and the dashboard's data need\n"
    "                           'Authorization: Bearer TOKEN'\n"
    "  --metrics-host H         address of the metrics server (default 127.0.0.1)\n"
    "  --handshake-timeout-ms N close a connection that has not completed its handshake\n"
    "                           (authentication included) this long after it connected\n"
    "                           (default 10000)\n"
    "  --max-connections N      most connections open at once; beyond it new ones are\n"
    "                           closed at once (default 4096, at most the open-file limit\n"
    "                           less 64, raised towards its hard limit as needed)\n"
    "  --max-handshakes N       most connections in their handshake at once (default 256)\n"
    "  --autoscale-window-ms N  how often to recompute the recommended number of workers\n"
    "                           (sluice status, sluice_recommended_workers) from the\n"
    "                           figures workers and clients reported meanwhile\n"
    "                           (default 10000)\n"
    "  --autoscale-pool-label KEY\n"
    "                           the worker label whose value names a worker's pool: a\n"
    "                           recommendation per pool (sluice status, autoscale.pools;\n"
    "                           sluice_autoscale_recommended_workers{pool}); workers\n"
    "                           without it form the pool \"\" (default pool)\n"
    "  --data-root DIR          refuse to register file sources (lines, tfrecord, tar, and\n"
    "                           snapshot directories) that name files outside DIR, after\n"
    "                           resolving '..' and symbolic links (repeatable; workers\n"
    "                           check again with their own --data-root; without any,\n"
    "                           files are not confined); an s3://BUCKET/PREFIX or\n"
    "                           https://HOST/PREFIX root confines URLs to that prefix,\n"
    "                           taken as a directory\n"
    "  --object-retry-ms N      retry an object-store request (s3://, https://) that fails\n"
    "                           transiently for up to N ms (default 60000)\n"
    "  --object-range-bytes N   bytes per ranged GET of an object (4096 to 1073741824;\n"
    "                           default 8388608)\n"
    "  --log-level L            debug, info, warn, error or off (default info)\n"
    "  --max-datasets N         refuse to register more than N datasets (default 10000)\n"
    "  --max-pipeline-bytes N   refuse a pipeline whose definition or text is over N bytes\n"
    "                           (default 1048576)\n"
    "  --max-jobs-per-client N  refuse a client a read when it already holds N open\n"
    "                           (default 1000)\n"
    "  --raft-id N              run as replica N of a group of dispatchers on Raft (3 or 5;\n"
    "                           needs --work-dir, which holds its Raft log; implies\n"
    "                           --fault-tolerant). The leader serves; the others answer\n"
    "                           'not the leader' with its address\n"
    "  --raft-address H:P       this replica's Raft address, as in --raft-cluster\n"
    "  --raft-cluster LIST      the group: 1=HOST:PORT,2=HOST:PORT,3=HOST:PORT (Raft\n"
    "                           addresses; the same list on every replica)\n"
    "  --raft-bind H:P          listen for Raft there instead (e.g. 0.0.0.0:7001)\n"
    "  --advertise H:P          the RPC address other replicas send callers to (default: the\n"
    "                           bound host and port)\n"
    "  --raft-election-timeout-ms N\n"
    "                           elect a new leader after this long without one (100 to\n"
    "                           60000; default 600)\n"
    "  --raft-seed-journal DIR  start a NEW group from the journal of a single fault-tolerant\n"
    "                           dispatcher's work dir DIR (stopped, or a copy; only read)\n"
    "  --max-jobs-per-address N refuse a read when the clients connecting from its address\n"
    "                           already hold N open, whatever incarnations they send\n"
    "                           (default 1000)\n" SECURITY_USAGE_SERVER
    "  --help                   print this help\n"
    "  --version                print the version\n"
    "\n"
    "Exit status: 0 after a clean stop (SIGTERM or SIGINT), 1 on a runtime failure, 2 on bad\n"
    "usage.\n";

static void fail(const char *what, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(const char *what, const char *fmt, ...)
{
    char why[SLUICE_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, PROG ": %s: %s\n", what, why);
}

struct config {
    const char *host;
    long port;
    const char *work_dir;
    bool fault_tolerant;
    long long snapshot_every, journal_max_mb;
    bool journal_per_update; /* hidden: the benchmark's baseline */
    bool recover_to_last_good;
    long long worker_timeout_ms, client_timeout_ms, job_gc_timeout_ms;
    long long grace_ms; /* -1: the default; 0: off */
    long long autoscale_window_ms;
    const char *autoscale_pool_label;                                /* NULL: the default */
    long long max_datasets, max_pipeline_bytes, max_jobs_per_client; /* 0: the defaults */
    uint32_t object_retry_ms, object_range_bytes; /* 0: the environment's, else the defaults */
    long long max_jobs_per_address;               /* 0: the default */
    long long raft_id, raft_election_timeout_ms;
    const char *raft_address, *raft_cluster, *raft_bind, *advertise, *raft_seed_journal;
    char *worker_addresses_text;
    char **worker_addresses;
    size_t nworker_addresses;
    const char **data_roots;
    size_t ndata_roots;
    long metrics_port; /* -1: not given */
    const char *metrics_host;
    long long handshake_timeout_ms, max_connections, max_handshakes;
    enum log_level log_level;
    struct sluice_security_options security;
};

static bool parse_num(const char *text, long long min, long long max, long long *out)
{
    if (!text || !*text || (*text != '-' && (*text < '0' || *text > '9')))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* Splits the comma-separated list in place; each entry must be HOST:PORT (a sluice:// prefix
 * is dropped, so entries compare equal to the addresses workers advertise). */
static int parse_worker_addresses(struct config *c, const char *text)
{
    c->worker_addresses_text = strdup(text);
    size_t n = 1;
    for (const char *p = text; *p; p++)
        n += *p == ',';
    c->worker_addresses = calloc(n, sizeof *c->worker_addresses);
    if (!c->worker_addresses_text || !c->worker_addresses) {
        fail("usage", "out of memory");
        return -1;
    }
    char *p = c->worker_addresses_text;
    for (char *entry = strsep(&p, ","); entry; entry = strsep(&p, ",")) {
        char host[256], err[SLUICE_ERRMSG_SIZE];
        int port;
        if (!*entry) {
            fail("usage", "--worker-addresses: empty entry in '%s'", text);
            return -1;
        }
        if (rpc_parse_address(entry, host, sizeof host, &port, err, sizeof err) < 0) {
            fail("usage", "--worker-addresses: %s", err);
            return -1;
        }
        if (strncmp(entry, "sluice://", 9) == 0)
            entry += 9;
        for (size_t i = 0; i < c->nworker_addresses; i++) {
            if (strcmp(c->worker_addresses[i], entry) == 0) {
                fail("usage", "--worker-addresses: '%s' is listed twice", entry);
                return -1;
            }
        }
        c->worker_addresses[c->nworker_addresses++] = entry;
    }
    return 0;
}

/* Returns 0 to run, 1 after --help or --version, -1 after a usage error (already printed). */
static int parse_args(int argc, char **argv, struct config *c)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(usage, stdout);
            return 1;
        }
        if (strcmp(arg, "--version") == 0) {
            printf("sluice %s\n", sluice_version());
            return 1;
        }
        if (strcmp(arg, "--fault-tolerant") == 0) {
            c->fault_tolerant = true;
            continue;
        }
        if (strcmp(arg, "--recover-to-last-good") == 0) {
            c->recover_to_last_good = true;
            continue;
        }
        if (strcmp(arg, "--insecure") == 0) {
            c->security.insecure = true;
            continue;
        }
        /* Not in the usage: every update in its own transaction, the baseline that
         * bench/bench_journal.c measures group commit against. */
        if (strcmp(arg, "--journal-per-update") == 0) {
            c->journal_per_update = true;
            continue;
        }
        if (strncmp(arg, "--", 2) != 0) {
            fail("usage", "unexpected argument '%s' (try --help)", arg);
            return -1;
        }
        /* Every other option takes a value: --name VALUE or --name=VALUE. */
        char name[64];
        const char *value;
        const char *eq = strchr(arg, '=');
        if (eq) {
            snprintf(name, sizeof name, "%.*s", (int)(eq - arg), arg);
            value = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", arg);
            value = i + 1 < argc ? argv[++i] : NULL;
        }
        static const char *const known[] = {"--host",
                                            "--port",
                                            "--work-dir",
                                            "--snapshot-every",
                                            "--journal-max-mb",
                                            "--worker-timeout-ms",
                                            "--client-timeout-ms",
                                            "--disconnect-grace-ms",
                                            "--job-gc-timeout-ms",
                                            "--worker-addresses",
                                            "--metrics-port",
                                            "--autoscale-window-ms",
                                            "--autoscale-pool-label",
                                            "--log-level",
                                            "--data-root",
                                            "--object-retry-ms",
                                            "--object-range-bytes",
                                            "--max-datasets",
                                            "--max-pipeline-bytes",
                                            "--max-jobs-per-client",
                                            "--max-jobs-per-address",
                                            "--auth-token-file",
                                            "--tls-cert",
                                            "--tls-key",
                                            "--tls-ca",
                                            "--metrics-host",
                                            "--handshake-timeout-ms",
                                            "--max-connections",
                                            "--max-handshakes",
                                            "--raft-id",
                                            "--raft-address",
                                            "--raft-cluster",
                                            "--raft-bind",
                                            "--advertise",
                                            "--raft-election-timeout-ms",
                                            "--raft-seed-journal"};
        bool is_known = false;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
            is_known |= strcmp(name, known[k]) == 0;
        if (!is_known) {
            fail("usage", "unknown option '%s' (try --help)", name);
            return -1;
        }
        if (!value) {
            fail("usage", "%s needs a value", name);
            return -1;
        }
        long long v;
        int sec = security_parse_flag(&c->security, name, value);
        if (sec < 0) {
            fail("usage", "%s needs a value", name);
            return -1;
        }
        if (sec > 0)
            continue;
        if (strcmp(name, "--host") == 0 || strcmp(name, "--metrics-host") == 0) {
            if (!*value) {
                fail("usage", "%s needs a value", name);
                return -1;
            }
            if (strcmp(name, "--host") == 0)
                c->host = value;
            else
                c->metrics_host = value;
        } else if (strcmp(name, "--max-connections") == 0 ||
                   strcmp(name, "--max-handshakes") == 0) {
            if (!parse_num(value, 1, 1000000, &v)) {
                fail("usage", "%s: expected a number from 1 to 1000000, found '%s'", name, value);
                return -1;
            }
            if (strcmp(name, "--max-connections") == 0)
                c->max_connections = v;
            else
                c->max_handshakes = v;
        } else if (strcmp(name, "--port") == 0 || strcmp(name, "--metrics-port") == 0) {
            if (!parse_num(value, 0, 65535, &v)) {
                fail("usage", "%s: expected a port from 0 to 65535, found '%s'", name, value);
                return -1;
            }
            if (strcmp(name, "--port") == 0)
                c->port = (long)v;
            else
                c->metrics_port = (long)v;
        } else if (strcmp(name, "--work-dir") == 0) {
            if (!*value) {
                fail("usage", "--work-dir needs a value");
                return -1;
            }
            c->work_dir = value;
        } else if (strcmp(name, "--snapshot-every") == 0) {
            if (!parse_num(value, 1, 1000000000000LL, &v)) {
                fail("usage", "--snapshot-every: expected a number of changes from 1, found '%s'",
                     value);
                return -1;
            }
            c->snapshot_every = v;
        } else if (strcmp(name, "--journal-max-mb") == 0) {
            if (!parse_num(value, 1, 1LL << 24, &v)) {
                fail("usage", "--journal-max-mb: expected a size in MiB from 1, found '%s'", value);
                return -1;
            }
            c->journal_max_mb = v;
        } else if (strcmp(name, "--max-datasets") == 0 ||
                   strcmp(name, "--max-pipeline-bytes") == 0 ||
                   strcmp(name, "--max-jobs-per-client") == 0 ||
                   strcmp(name, "--max-jobs-per-address") == 0) {
            if (!parse_num(value, 1, LLONG_MAX, &v)) {
                fail("usage", "%s: expected a number from 1, found '%s'", name, value);
                return -1;
            }
            if (strcmp(name, "--max-datasets") == 0)
                c->max_datasets = v;
            else if (strcmp(name, "--max-pipeline-bytes") == 0)
                c->max_pipeline_bytes = v;
            else if (strcmp(name, "--max-jobs-per-client") == 0)
                c->max_jobs_per_client = v;
            else
                c->max_jobs_per_address = v;
        } else if (strcmp(name, "--log-level") == 0) {
            if (log_level_parse(value, &c->log_level) < 0) {
                fail("usage", "--log-level: expected debug, info, warn, error or off, found '%s'",
                     value);
                return -1;
            }
        } else if (strcmp(name, "--object-retry-ms") == 0) {
            if (!parse_num(value, 1, OBJ_MAX_RETRY_MS, &v)) {
                fail("usage", "%s: expected a number from 1 to %u, found '%s'", name,
                     OBJ_MAX_RETRY_MS, value);
                return -1;
            }
            c->object_retry_ms = (uint32_t)v;
        } else if (strcmp(name, "--object-range-bytes") == 0) {
            if (!parse_num(value, OBJ_MIN_RANGE_BYTES, OBJ_MAX_RANGE_BYTES, &v)) {
                fail("usage", "%s: expected a number from %u to %u, found '%s'", name,
                     OBJ_MIN_RANGE_BYTES, OBJ_MAX_RANGE_BYTES, value);
                return -1;
            }
            c->object_range_bytes = (uint32_t)v;
        } else if (strcmp(name, "--autoscale-pool-label") == 0) {
            char kv[LABEL_KEY_MAX + 3], why[SLUICE_ERRMSG_SIZE];
            if (!*value) {
                fail("usage", "--autoscale-pool-label: expected a label key, found ''");
                return -1;
            }
            snprintf(kv, sizeof kv, "%.*s=", LABEL_KEY_MAX + 1, value);
            if (strchr(value, '=') || strlen(value) > LABEL_KEY_MAX ||
                label_check(kv, why, sizeof why) < 0) {
                fail("usage",
                     "--autoscale-pool-label: '%s' is not a label key (1 to %d bytes, "
                     "no white space or any of = ! , ( ))",
                     value, LABEL_KEY_MAX);
                return -1;
            }
            c->autoscale_pool_label = value;
        } else if (strcmp(name, "--data-root") == 0) {
            if (!*value) {
                fail("usage", "--data-root: expected a directory, found ''");
                return -1;
            }
            const char **more = realloc(c->data_roots, (c->ndata_roots + 1) * sizeof *more);
            if (!more) {
                fail("start", "out of memory");
                return -1;
            }
            c->data_roots = more;
            c->data_roots[c->ndata_roots++] = value;
        } else if (strcmp(name, "--raft-id") == 0) {
            if (!parse_num(value, 1, 1LL << 62, &v)) {
                fail("usage", "--raft-id: expected a number from 1, found '%s'", value);
                return -1;
            }
            c->raft_id = v;
        } else if (strcmp(name, "--disconnect-grace-ms") == 0) {
            if (!parse_num(value, 0, UINT32_MAX - 1, &v)) {
                fail("usage",
                     "%s: expected a number of milliseconds from 0 (off) to %u, found '%s'", name,
                     UINT32_MAX - 1, value);
                return -1;
            }
            c->grace_ms = v;
        } else if (strcmp(name, "--raft-election-timeout-ms") == 0) {
            if (!parse_num(value, 100, 60000, &v)) {
                fail("usage", "%s: expected a number from 100 to 60000, found '%s'", name, value);
                return -1;
            }
            c->raft_election_timeout_ms = v;
        } else if (strcmp(name, "--raft-address") == 0 || strcmp(name, "--raft-cluster") == 0 ||
                   strcmp(name, "--raft-bind") == 0 || strcmp(name, "--advertise") == 0 ||
                   strcmp(name, "--raft-seed-journal") == 0) {
            if (!*value) {
                fail("usage", "%s needs a value", name);
                return -1;
            }
            if (strcmp(name, "--raft-address") == 0)
                c->raft_address = value;
            else if (strcmp(name, "--raft-cluster") == 0)
                c->raft_cluster = value;
            else if (strcmp(name, "--raft-bind") == 0)
                c->raft_bind = value;
            else if (strcmp(name, "--raft-seed-journal") == 0)
                c->raft_seed_journal = value;
            else
                c->advertise = value;
        } else if (strcmp(name, "--worker-addresses") == 0) {
            if (c->worker_addresses) {
                fail("usage", "--worker-addresses given twice");
                return -1;
            }
            if (parse_worker_addresses(c, value) < 0)
                return -1;
        } else {
            if (!parse_num(value, 1, UINT32_MAX, &v)) {
                fail("usage", "%s: expected a number of milliseconds from 1 to %u, found '%s'",
                     name, UINT32_MAX, value);
                return -1;
            }
            if (strcmp(name, "--handshake-timeout-ms") == 0)
                c->handshake_timeout_ms = v;
            else if (strcmp(name, "--worker-timeout-ms") == 0)
                c->worker_timeout_ms = v;
            else if (strcmp(name, "--client-timeout-ms") == 0)
                c->client_timeout_ms = v;
            else if (strcmp(name, "--autoscale-window-ms") == 0)
                c->autoscale_window_ms = v;
            else
                c->job_gc_timeout_ms = v;
        }
    }
    if (c->raft_id) {
        if (!c->raft_address || !c->raft_cluster || !c->work_dir) {
            fail("usage", "--raft-id needs --raft-address, --raft-cluster and --work-dir");
            return -1;
        }
        if (c->journal_max_mb || c->journal_per_update || c->recover_to_last_good) {
            fail("usage", "--journal-max-mb and --recover-to-last-good are for a single "
                          "dispatcher's journal, not a replica's Raft log");
            return -1;
        }
        c->fault_tolerant = true;
    } else if (c->raft_address || c->raft_cluster || c->raft_bind || c->raft_election_timeout_ms) {
        fail("usage", "--raft-address, --raft-cluster, --raft-bind and "
                      "--raft-election-timeout-ms need --raft-id");
        return -1;
    }
    if (c->fault_tolerant && !c->work_dir) {
        fail("usage", "--fault-tolerant needs --work-dir");
        return -1;
    }
    /* A work dir alone would suggest durability that is not there. */
    if (c->work_dir && !c->fault_tolerant) {
        fail("usage", "--work-dir is used only with --fault-tolerant");
        return -1;
    }
    if (!c->fault_tolerant && (c->snapshot_every || c->journal_max_mb || c->journal_per_update ||
                               c->recover_to_last_good)) {
        fail("usage",
             "--snapshot-every, --journal-max-mb and --recover-to-last-good need --fault-tolerant");
        return -1;
    }
    return 0;
}

/* ---- running --------------------------------------------------------------------------------- */

/* SIGTERM or SIGINT stops the dispatcher; a second signal of either kind ends the process. */
static int on_signal(void *user, int signum)
{
    log_info("%s: shutting down", signum == SIGTERM ? "SIGTERM" : "SIGINT");
    sluice_dispatcher_shutdown(user);
    return SIGNALS_INT | SIGNALS_TERM;
}

int main(int argc, char **argv)
{
    /* Before any thread: the servers' threads inherit the mask, and the signal thread takes
     * SIGINT and SIGTERM. */
    signals_block();
    struct config c = {
        .host = "127.0.0.1",
        .port = 5050,
        .metrics_port = -1,
        .log_level = LOG_INFO,
        .grace_ms = -1,
    };
    int rc = parse_args(argc, argv, &c);
    int code = rc > 0 ? 0 : EXIT_USAGE;
    if (rc != 0)
        goto out_config;
    code = EXIT_RUNTIME;
    log_init(PROG, c.log_level);
    obj_configure(c.object_retry_ms, c.object_range_bytes);
    /* A peer that vanishes mid-write must cost a write error, not the process. */
    signal(SIGPIPE, SIG_IGN);

    struct sluice_dispatcher_options opts = {
        .host = c.host,
        .port = (int)c.port,
        .fault_tolerant = c.fault_tolerant,
        .work_dir = c.work_dir,
        .snapshot_every = (uint64_t)c.snapshot_every,
        .journal_max_mb = (uint64_t)c.journal_max_mb,
        .journal_per_update = c.journal_per_update,
        .worker_timeout_ms = (uint32_t)c.worker_timeout_ms,
        .client_timeout_ms = (uint32_t)c.client_timeout_ms,
        .disconnect_grace_ms = c.grace_ms < 0    ? 0
                               : c.grace_ms == 0 ? UINT32_MAX
                                                 : (uint32_t)c.grace_ms,
        .job_gc_timeout_ms = (uint32_t)c.job_gc_timeout_ms,
        .autoscale_window_ms = (uint32_t)c.autoscale_window_ms,
        .autoscale_pool_label = c.autoscale_pool_label,
        .worker_addresses = (const char *const *)c.worker_addresses,
        .nworker_addresses = c.nworker_addresses,
        .data_roots = c.data_roots,
        .ndata_roots = c.ndata_roots,
        .metrics = c.metrics_port >= 0,
        .metrics_port = c.metrics_port >= 0 ? (int)c.metrics_port : 0,
        .metrics_host = c.metrics_host,
        .handshake_timeout_ms = (uint32_t)c.handshake_timeout_ms,
        .max_connections = (unsigned)c.max_connections,
        .max_handshakes = (unsigned)c.max_handshakes,
        .log_level = log_level_name(c.log_level),
        .security = c.security,
        .recover_to_last_good = c.recover_to_last_good,
        .max_datasets = (uint64_t)c.max_datasets,
        .max_pipeline_bytes = (uint64_t)c.max_pipeline_bytes,
        .max_jobs_per_client = (uint64_t)c.max_jobs_per_client,
        .max_jobs_per_address = (uint64_t)c.max_jobs_per_address,
        .raft_id = (uint64_t)c.raft_id,
        .raft_address = c.raft_address,
        .raft_cluster = c.raft_cluster,
        .raft_bind = c.raft_bind,
        .advertise = c.advertise,
        .raft_election_timeout_ms = (uint32_t)c.raft_election_timeout_ms,
        .raft_seed_journal = c.raft_seed_journal,
    };
    char err[SLUICE_ERRMSG_SIZE];
    struct sluice_dispatcher *d;
    rc = sluice_dispatcher_start(&opts, &d, err, sizeof err);
    if (rc < 0) {
        /* err already reads "what: why", e.g. "listen on HOST:PORT: Address in use". */
        fflush(stdout);
        fprintf(stderr, PROG ": %s\n", err);
        goto out_config;
    }
    printf(PROG " listening on %s\n", sluice_dispatcher_target(d));
    if (sluice_dispatcher_metrics_address(d))
        printf(PROG " metrics on %s\n", sluice_dispatcher_metrics_address(d));
    fflush(stdout);

    static struct signals sig;
    rc = signals_start(&sig, on_signal, d);
    if (rc < 0) {
        fail("start", "signal thread: %s", sluice_strerror(rc));
        sluice_dispatcher_stop(d);
        goto out_config;
    }
    rc = sluice_dispatcher_wait(d, 0, err, sizeof err);
    signals_stop(&sig);
    code = 0;
    if (rc < 0) {
        /* "journal: DIR: commit: No space left on device", or "shutdown: why". */
        fflush(stdout);
        fprintf(stderr, PROG ": %s\n", err);
        code = EXIT_RUNTIME;
    }
    sluice_dispatcher_stop(d);

out_config:
    free(c.data_roots);
    free(c.worker_addresses);
    free(c.worker_addresses_text);
    return code;
}
