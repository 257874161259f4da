/* sluice read: reads a dataset's elements from the service and prints them, one per line, like
 * `sluice run` prints a local pipeline's.
 *
 * SIGINT and SIGTERM while reading end the read cleanly: the output so far is flushed, the job
 * is released on the dispatcher, and the process then dies of the same signal (so a shell sees
 * it was interrupted). Before the read is open they act as usual. */
#include "cli.h"
#include "progress.h"
#include "read_checkpoint.h"
#include "wait.h"

#include "client/iterator.h"
#include "client/waiting.h"
#include "common/error.h"
#include "common/mode.h"
#include "common/shm_ring.h"
#include "pipeline/format.h"
#include "sluice/sluice.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char read_usage[] =
    "usage: sluice read --dispatcher H:P (PIPELINE | --dataset-id ID)\n"
    "                   [--mode parallel_epochs|distributed_epoch|off|dynamic|file|data|"
    "file_or_data|hint]\n"
    "                   [--job-name NAME] [--consumer-index I --num-consumers N]\n"
    "                   [--max-outstanding-requests N] [--local PIPELINE_TAIL]\n"
    "                   [--whole-copies] [--hedge [--hedge-factor K] | --no-hedge]\n"
    "                   [--format text|count|rounds] [--limit N] [--timeout-ms N]\n"
    "                   [--deterministic [--reorder-bytes N] [--shard I/N]]\n"
    "                   [--target-workers any|local|auto]\n"
    "                   [--no-shm] [--shm-bytes N]\n"
    "                   [--worker-selector SEL] [--weight W] [--min-workers N] [--max-workers N]\n"
    "                   [--cross-trainer-cache --trainer-id ID [--cross-trainer-cache-bytes N]]\n"
    "                   [--split-size N] [--plugin LIB.so]... [--auth-token-file F]\n"
    "                   [--tls-ca F [--tls-cert F --tls-key F] [--tls-worker-name NAME]]\n"
    "                   [--output FILE] [--checkpoint FILE [--checkpoint-every N]]\n"
    "                   [--progress | --quiet]\n"
    "\n"
    "Reads the elements of a dataset from the workers and prints one per line (--format text,\n"
    "the default) or only their number (--format count). Give a PIPELINE to register it first,\n"
    "or the --dataset-id of one registered before. Coordinated reads may print each element\n"
    "after its round and the task that served it (--format rounds: 'ROUND TASK ELEMENT'), as\n"
    "the other consumers of the job see it too.\n"
    "\n"
    "  --mode M            how workers split the work (default parallel_epochs; off and\n"
    "                      dynamic are the old names of parallel_epochs and distributed_epoch)\n"
    "  --job-name NAME     share the job with other readers of the same name and dataset\n"
    "                      (names and ids: UTF-8 without control characters, at most 127\n"
    "                      bytes)\n"
    "  --consumer-index I --num-consumers N\n"
    "                      coordinated reads: this is reader I of N (needs --job-name and a\n"
    "                      pipeline that never ends: repeat() with no count)\n"
    "  --max-outstanding-requests N\n"
    "                      requests in flight to workers at once (default 8)\n"
    "  --whole-copies      parallel_epochs and static sharding: fail the read when a worker\n"
    "                      is lost in the middle of its copy (by default the read goes on\n"
    "                      without the rest of that copy, and counts it cut short)\n"
    "  --hedge             distributed_epoch: a split leased longer than K times the job's\n"
    "                      median split time is leased again to a worker with room for it;\n"
    "                      the first copy received wins and the other's elements are\n"
    "                      dropped, so every element still arrives once (a read of its own,\n"
    "                      not --job-name or --deterministic; off by default)\n"
    "  --hedge-factor K    the K of --hedge (default 3; implies --hedge)\n"
    "  --no-hedge          no hedged splits (the default)\n"
    "  --local TAIL        ops applied here to the elements that arrive, e.g. 'batch(4)'\n"
    "                      (a repeat in it reads the stream again, a new job per pass)\n"
    "  --deterministic     distributed_epoch (the mode it implies) in the canonical order:\n"
    "                      splits by sequence number, elements by position in their split,\n"
    "                      the same with any number of workers, failures and restarts\n"
    "  --reorder-bytes N   bytes of replies held to reorder them (default 256 MiB)\n"
    "  --shard I/N         with --deterministic: only the elements at places I, I+N, I+2N,\n"
    "                      ... of the canonical order; N such reads (I = 0..N-1), each a job\n"
    "                      of its own, read one element each in turn give the canonical order\n"
    "  --target-workers T  any (default): every worker; local: only workers on this host\n"
    "                      (one kernel and network namespace, or SLUICE_HOST_ID), an error\n"
    "                      when it has none; auto: every worker, those on this host first\n"
    "  --no-shm            read workers on this host over TCP too (by default their element\n"
    "                      payloads come through a memory region shared with each of them)\n"
    "  --shm-bytes N       the size of each such region, a multiple of 64 from 1 MiB to 1 TiB\n"
    "                      (default 1 GiB); a worker never writes more than it holds\n"
    "  --worker-selector SEL\n"
    "                      run the job's tasks only on workers whose labels (sluice-worker\n"
    "                      --label) match SEL: comma-separated requirements that all hold,\n"
    "                      each key=value, key!=value, 'key in (a,b)', 'key notin (a,b)', key\n"
    "                      (the label is there) or !key; with none matching, the job waits for\n"
    "                      a matching worker to register\n"
    "  --weight W          the job's weight against other jobs (default 1; above 0)\n"
    "  --min-workers N --max-workers N\n"
    "                      bounds on the number of workers that run the job's tasks (default\n"
    "                      none: every matching worker)\n"
    "  --cross-trainer-cache --trainer-id ID\n"
    "                      share the stream of the job --job-name (a pipeline that never ends)\n"
    "                      with its other trainers: each worker task keeps what it produced in\n"
    "                      a cache and serves every trainer id from its own cursor; a new id\n"
    "                      starts at the oldest element cached, a known one continues its own\n"
    "                      cursor, one that falls behind the cache skips ahead\n"
    "  --cross-trainer-cache-bytes N\n"
    "                      bound of each worker task's cache (default 256 MiB)\n"
    "  --limit N           stop after N elements\n"
    "  --split-size N      elements per split of the PIPELINE registered here (see\n"
    "                      'sluice register --help')\n"
    "  --plugin LIB.so     load functions the pipeline or the tail uses\n"
    "                      (repeatable)\n"
    "  --output FILE       write the elements to FILE instead of standard output\n"
    "  --checkpoint FILE   keep the read's position in FILE (implies --mode distributed_epoch),\n"
    "                      and continue\n"
    "                      from it when FILE exists (then PIPELINE and --dataset-id may be\n"
    "                      left out). It is written atomically every --checkpoint-every\n"
    "                      elements and at exit, after the elements it covers are flushed to\n"
    "                      the output; with --output, a resumed read first cuts FILE back to\n"
    "                      what the checkpoint covers, so the output holds the epoch exactly\n"
    "                      once however often the read was killed. An unreadable checkpoint\n"
    "                      is an error, never a fresh start.\n"
    "  --progress          print a progress line (elements, elements/s, MB/s, elapsed, and\n"
    "                      the share of the epoch and its ETA when known) to standard error\n"
    "                      every 5 s, for logs; on a terminal one line is kept up to date\n"
    "                      without it\n"
    "  --quiet             no progress display\n"
    "  --checkpoint-every N\n"
    "                      elements between checkpoints (default 100000)\n" CLI_TIMEOUT_USAGE
        CLI_DISPATCHER_USAGE CLI_SECURITY_USAGE "  --tls-worker-name NAME\n"
    "                      verify workers' certificates against NAME instead of the address\n"
    "                      each worker advertises (one certificate for every worker, e.g.\n"
    "                      pods whose IPs are assigned at start)\n"
    "\n"
    "example: sluice read --dispatcher 127.0.0.1:5050 'range(10) | map(square)'\n";

/* The longest single wait for an element: the read checks its timeout and says why it waits
 * at this pace. */
#define READ_SLICE_MS 200

/* The open iterator, for the signal handler; set only while the handler is installed. */
static struct sluice_iterator *volatile read_it;
static volatile sig_atomic_t read_signal;

static void on_signal(int sig)
{
    read_signal = sig;
    if (read_it)
        iter_interrupt(read_it);
}

static void set_handlers(void (*handler)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

struct read_args {
    const char *dispatcher;
    struct sluice_security_options security;
    struct sluice_read_options opts;
    bool count_only;
    bool rounds; /* --format rounds */
    bool has_limit;
    unsigned long long limit;
    unsigned long long timeout_ms;
    const char *plugins[CLI_MAX_PLUGINS];
    size_t nplugins;
    bool has_mode;
    int hedge;              /* --hedge 1, --no-hedge 0, neither -1 */
    double hedge_factor;    /* --hedge-factor; 0: the default */
    bool progress, quiet;   /* --progress, --quiet */
    const char *output;     /* --output */
    const char *checkpoint; /* --checkpoint */
    unsigned long long checkpoint_every;
};

/* Parses a u32 option value; prints the usage error and returns -1 when it is not one. */
static int parse_u32(const char *opt, const char *text, uint32_t *out)
{
    unsigned long long v;
    if (cli_parse_u64(text, &v) != 0 || v > UINT32_MAX) {
        cli_error("usage", "%s takes a non-negative integer below 2^32, not '%s'", opt, text);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

/* --shard I/N: two numbers as cli_parse_u64 takes them, 0 <= I < N. */
static int parse_shard(const char *text, struct sluice_read_options *o)
{
    unsigned long long index, count;
    char head[24];
    const char *slash = strchr(text, '/');
    size_t n = slash ? (size_t)(slash - text) : 0;
    if (!slash || n >= sizeof head)
        goto bad;
    memcpy(head, text, n);
    head[n] = '\0';
    if (cli_parse_u64(head, &index) != 0 || cli_parse_u64(slash + 1, &count) != 0 || count == 0 ||
        count > UINT32_MAX || index >= count)
        goto bad;
    o->shard_index = (uint32_t)index;
    o->shard_count = (uint32_t)count;
    return 0;
bad:
    cli_error("usage", "--shard takes I/N with 0 <= I < N, not '%s'", text);
    return -1;
}

/* Returns -1 to go on reading, or the exit status. */
static int parse_args(int argc, char **argv, struct read_args *a)
{
    bool has_mode = false;
    bool has_index = false, has_count = false;
    int k;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        bool more = i + 1 < argc;
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            fputs(read_usage, stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(s, "--dispatcher") == 0 && more) {
            a->dispatcher = argv[++i];
        } else if (strcmp(s, "--dataset-id") == 0 && more) {
            a->opts.dataset_id = argv[++i];
            if (!*a->opts.dataset_id) {
                cli_error("usage", "--dataset-id takes a non-empty id");
                return CLI_EXIT_USAGE;
            }
        } else if (strcmp(s, "--mode") == 0 && more) {
            const char *m = argv[++i];
            has_mode = true;
            if (mode_parse(m, &a->opts.mode) < 0) {
                cli_error("usage",
                          "--mode takes parallel_epochs, distributed_epoch, off, dynamic, file, "
                          "data, file_or_data or hint, not '%s'",
                          m);
                return CLI_EXIT_USAGE;
            }
            a->has_mode = true;
        } else if (strcmp(s, "--job-name") == 0 && more) {
            a->opts.job_name = argv[++i];
            if (!*a->opts.job_name) {
                cli_error("usage", "--job-name takes a non-empty name");
                return CLI_EXIT_USAGE;
            }
        } else if (strcmp(s, "--consumer-index") == 0 && more) {
            if (parse_u32(s, argv[++i], &a->opts.consumer_index) != 0)
                return CLI_EXIT_USAGE;
            has_index = true;
        } else if (strcmp(s, "--num-consumers") == 0 && more) {
            if (parse_u32(s, argv[++i], &a->opts.num_consumers) != 0)
                return CLI_EXIT_USAGE;
            has_count = true;
        } else if (strcmp(s, "--max-outstanding-requests") == 0 && more) {
            if (parse_u32(s, argv[++i], &a->opts.max_outstanding_requests) != 0)
                return CLI_EXIT_USAGE;
            if (a->opts.max_outstanding_requests == 0) {
                cli_error("usage", "--max-outstanding-requests takes a number >= 1");
                return CLI_EXIT_USAGE;
            }
        } else if (strcmp(s, "--local") == 0 && more) {
            a->opts.local = argv[++i];
        } else if (strcmp(s, "--whole-copies") == 0) {
            a->opts.whole_copies = true;
        } else if (strcmp(s, "--hedge") == 0) {
            a->hedge = 1;
        } else if (strcmp(s, "--no-hedge") == 0) {
            a->hedge = 0;
        } else if (strcmp(s, "--hedge-factor") == 0 && more) {
            char *end;
            const char *t = argv[++i];
            double factor = strtod(t, &end);
            if (end == t || *end || !(factor > 0 && factor <= 1000)) {
                cli_error("usage",
                          "--hedge-factor takes a number above 0 and at most 1000, not "
                          "'%s'",
                          t);
                return CLI_EXIT_USAGE;
            }
            a->hedge_factor = factor;
            if (a->hedge < 0)
                a->hedge = 1;
        } else if (strcmp(s, "--deterministic") == 0) {
            a->opts.deterministic = true;
        } else if (strcmp(s, "--target-workers") == 0 && more) {
            const char *t = argv[++i];
            if (sluice_target_workers_parse(t, &a->opts.target_workers) < 0) {
                cli_error("usage", "--target-workers takes any, local or auto, not '%s'", t);
                return CLI_EXIT_USAGE;
            }
        } else if (strcmp(s, "--no-shm") == 0) {
            a->opts.no_shm = true;
        } else if (strcmp(s, "--shm-bytes") == 0 && more) {
            unsigned long long v;
            if (cli_parse_u64(argv[++i], &v) != 0 || shm_ring_check_size(v) != 0) {
                cli_error("usage",
                          "--shm-bytes takes a multiple of 64 from 1048576 to 1099511627776, "
                          "not '%s'",
                          argv[i]);
                return CLI_EXIT_USAGE;
            }
            a->opts.shm_bytes = v;
        } else if (strcmp(s, "--worker-selector") == 0 && more) {
            if (cli_check_selector(argv[++i]) != 0)
                return CLI_EXIT_USAGE;
            a->opts.worker_selector = argv[i];
        } else if (strcmp(s, "--weight") == 0 && more) {
            if (cli_parse_weight(argv[++i], &a->opts.weight) != 0)
                return CLI_EXIT_USAGE;
        } else if (strcmp(s, "--min-workers") == 0 && more) {
            if (parse_u32(s, argv[++i], &a->opts.min_workers) != 0)
                return CLI_EXIT_USAGE;
        } else if (strcmp(s, "--max-workers") == 0 && more) {
            if (parse_u32(s, argv[++i], &a->opts.max_workers) != 0)
                return CLI_EXIT_USAGE;
        } else if (strcmp(s, "--reorder-bytes") == 0 && more) {
            unsigned long long v;
            if (cli_parse_u64(argv[++i], &v) != 0 || v == 0) {
                cli_error("usage", "--reorder-bytes takes a number of bytes >= 1, not '%s'",
                          argv[i]);
                return CLI_EXIT_USAGE;
            }
            a->opts.reorder_bytes = v;
        } else if (strcmp(s, "--shard") == 0 && more) {
            if (parse_shard(argv[++i], &a->opts) != 0)
                return CLI_EXIT_USAGE;
        } else if (strcmp(s, "--cross-trainer-cache") == 0) {
            a->opts.cross_trainer_cache = true;
        } else if (strcmp(s, "--trainer-id") == 0 && more) {
            a->opts.trainer_id = argv[++i];
            if (!*a->opts.trainer_id) {
                cli_error("usage", "--trainer-id takes a non-empty id");
                return CLI_EXIT_USAGE;
            }
        } else if (strcmp(s, "--cross-trainer-cache-bytes") == 0 && more) {
            unsigned long long v;
            if (cli_parse_u64(argv[++i], &v) != 0 || v == 0) {
                cli_error("usage",
                          "--cross-trainer-cache-bytes takes a number of bytes >= 1, not '%s'",
                          argv[i]);
                return CLI_EXIT_USAGE;
            }
            a->opts.cross_trainer_cache_bytes = v;
        } else if (strcmp(s, "--format") == 0 && more) {
            const char *f = argv[++i];
            a->count_only = strcmp(f, "count") == 0;
            a->rounds = strcmp(f, "rounds") == 0;
            if (!a->count_only && !a->rounds && strcmp(f, "text") != 0) {
                cli_error("usage", "--format takes text, count or rounds, not '%s'", f);
                return CLI_EXIT_USAGE;
            }
        } else if (strcmp(s, "--limit") == 0 && more) {
            if (cli_parse_u64(argv[++i], &a->limit) != 0) {
                cli_error("usage", "--limit takes a non-negative integer, not '%s'", argv[i]);
                return CLI_EXIT_USAGE;
            }
            a->has_limit = true;
        } else if (strcmp(s, "--split-size") == 0 && more) {
            if (cli_parse_split_size(argv[++i], &a->opts.split_size) != 0)
                return CLI_EXIT_USAGE;
        } else if (strcmp(s, "--timeout-ms") == 0 && more) {
            if (cli_parse_u64(argv[++i], &a->timeout_ms) != 0 || a->timeout_ms > UINT32_MAX) {
                cli_error("usage", "--timeout-ms takes a number of milliseconds, not '%s'",
                          argv[i]);
                return CLI_EXIT_USAGE;
            }
        } else if (strcmp(s, "--progress") == 0) {
            a->progress = true;
        } else if (strcmp(s, "--quiet") == 0) {
            a->quiet = true;
        } else if (strcmp(s, "--output") == 0 && more) {
            a->output = argv[++i];
        } else if (strcmp(s, "--checkpoint") == 0 && more) {
            a->checkpoint = argv[++i];
        } else if (strcmp(s, "--checkpoint-every") == 0 && more) {
            if (cli_parse_u64(argv[++i], &a->checkpoint_every) != 0 || a->checkpoint_every == 0) {
                cli_error("usage", "--checkpoint-every takes a number of elements >= 1, not '%s'",
                          argv[i]);
                return CLI_EXIT_USAGE;
            }
        } else if (strcmp(s, "--plugin") == 0 && more) {
            if (a->nplugins == CLI_MAX_PLUGINS) {
                cli_error("usage", "at most %d --plugin options", CLI_MAX_PLUGINS);
                return CLI_EXIT_USAGE;
            }
            a->plugins[a->nplugins++] = argv[++i];
        } else if ((k = cli_parse_security(argc, argv, &i, &a->security)) != 0) {
            if (k < 0)
                return CLI_EXIT_USAGE;
        } else if (s[0] == '-' && s[1] == '-') {
            cli_error("usage", "unknown or incomplete option '%s' (try 'sluice read --help')", s);
            return CLI_EXIT_USAGE;
        } else if (!a->opts.pipeline) {
            a->opts.pipeline = s;
        } else {
            cli_error("usage", "one PIPELINE expected; unexpected '%s'", s);
            return CLI_EXIT_USAGE;
        }
    }

    /* --deterministic alone means distributed_epoch; with another mode the library refuses. */
    if (a->opts.deterministic && !has_mode)
        a->opts.mode = SLUICE_DISTRIBUTED_EPOCH;
    /* Hedging is off unless asked for (docs/design.md "Hedged splits" says why). */
    if (a->hedge == 1)
        a->opts.hedge_factor = a->hedge_factor > 0 ? a->hedge_factor : SLUICE_HEDGE_FACTOR_DEFAULT;
    if (a->opts.reorder_bytes && !a->opts.deterministic) {
        cli_error("usage", "--reorder-bytes goes with --deterministic");
        return CLI_EXIT_USAGE;
    }
    if (a->opts.shard_count && !a->opts.deterministic) {
        cli_error("usage", "--shard goes with --deterministic");
        return CLI_EXIT_USAGE;
    }
    if ((a->opts.trainer_id || a->opts.cross_trainer_cache_bytes) && !a->opts.cross_trainer_cache) {
        cli_error("usage", "%s goes with --cross-trainer-cache",
                  a->opts.trainer_id ? "--trainer-id" : "--cross-trainer-cache-bytes");
        return CLI_EXIT_USAGE;
    }
    if (a->opts.cross_trainer_cache && !a->opts.job_name) {
        cli_error("usage", "--cross-trainer-cache needs --job-name NAME");
        return CLI_EXIT_USAGE;
    }
    if (a->opts.cross_trainer_cache && !a->opts.trainer_id) {
        cli_error("usage", "--cross-trainer-cache needs --trainer-id ID");
        return CLI_EXIT_USAGE;
    }
    if (!a->dispatcher) {
        cli_error("usage", "--dispatcher H:P is required (try 'sluice read --help')");
        return CLI_EXIT_USAGE;
    }
    if (a->progress && a->quiet) {
        cli_error("usage", "--progress and --quiet exclude each other");
        return CLI_EXIT_USAGE;
    }
    /* A shard's own position is not a cut of the canonical order: only the merge of every
     * shard's position at one step is (docs/reading.md "Sharded deterministic reads"). */
    if (a->checkpoint && a->opts.shard_count > 0) {
        cli_error("usage", "--checkpoint cannot keep a sharded read's position: a shard resumes "
                           "from the merge of every shard's position at one step, not from its "
                           "own (sluice.merge_positions)");
        return CLI_EXIT_USAGE;
    }
    if (a->checkpoint && a->has_mode && a->opts.mode != SLUICE_DISTRIBUTED_EPOCH) {
        cli_error("usage", "--checkpoint needs --mode distributed_epoch, not %s",
                  mode_name(a->opts.mode));
        return CLI_EXIT_USAGE;
    }
    if (a->checkpoint) {
        a->opts.mode = SLUICE_DISTRIBUTED_EPOCH;
        if (a->opts.pipeline && a->opts.dataset_id) {
            cli_error("usage", "give either a PIPELINE or --dataset-id ID, not both");
            return CLI_EXIT_USAGE;
        }
    } else if (!a->opts.pipeline == !a->opts.dataset_id) {
        cli_error("usage", "give either a PIPELINE or --dataset-id ID, not %s",
                  a->opts.pipeline ? "both" : "neither");
        return CLI_EXIT_USAGE;
    }
    if (a->opts.split_size && !a->opts.pipeline) {
        cli_error("usage", "--split-size goes with a PIPELINE to register, not --dataset-id");
        return CLI_EXIT_USAGE;
    }
    if (a->rounds && (!has_count || a->opts.local)) {
        cli_error("usage", "--format rounds needs --num-consumers and no --local tail");
        return CLI_EXIT_USAGE;
    }
    if (a->opts.min_workers && a->opts.max_workers && a->opts.min_workers > a->opts.max_workers) {
        cli_error("usage", "--min-workers %" PRIu32 " is above --max-workers %" PRIu32,
                  a->opts.min_workers, a->opts.max_workers);
        return CLI_EXIT_USAGE;
    }
    if (has_index != has_count) {
        cli_error("usage", "--consumer-index and --num-consumers go together");
        return CLI_EXIT_USAGE;
    }
    if (has_count) {
        if (!a->opts.job_name) {
            cli_error("usage", "--consumer-index/--num-consumers need --job-name");
            return CLI_EXIT_USAGE;
        }
        if (a->opts.num_consumers == 0 || a->opts.consumer_index >= a->opts.num_consumers) {
            cli_error("usage", "--consumer-index must be below --num-consumers (%u), not %u",
                      (unsigned)a->opts.num_consumers, (unsigned)a->opts.consumer_index);
            return CLI_EXIT_USAGE;
        }
    }
    return -1;
}

/* The output of a read: standard output or --output, and what a checkpoint needs of it. */
struct read_out {
    FILE *f;
    bool regular;            /* a regular file: synced before a checkpoint covers it */
    uint64_t printed_before; /* elements printed by the runs before this one */
};

/* Saves the read's position to --checkpoint once the elements it covers are on their way:
 * flushed to the output (and synced when the output is a file). Returns 0 or -1 (reported). */
static int save_checkpoint(struct sluice_iterator *it, const struct read_args *a,
                           struct read_out *o, unsigned long long n)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct read_ckpt c = {0};
    /* Consumers of a named job go on after this one stops: the dispatcher hears first. */
    bool heard = !a->opts.job_name || sluice_iterator_report(it) != SLUICE_ERR_TIMEOUT;
    if (!heard)
        cli_error("checkpoint",
                  "warning: the dispatcher did not confirm within 5 s what this reader received; "
                  "the position is saved, but if this read stops before its next heartbeat "
                  "reaches the dispatcher, other readers of job '%s' may get some of those "
                  "elements again",
                  a->opts.job_name);
    int rc = sluice_iterator_save(it, &c.pos, &c.pos_len, err, sizeof err);
    if (rc < 0) {
        cli_error("checkpoint", "%s", err);
        return -1;
    }
    if (fflush(o->f) != 0 || ferror(o->f) || (o->regular && fdatasync(fileno(o->f)) < 0)) {
        cli_error("output", "write to %s failed: %s", a->output ? a->output : "standard output",
                  strerror(errno));
        read_ckpt_release(&c);
        return -1;
    }
    if (a->output) {
        off_t off = ftello(o->f);
        c.output_bytes = off < 0 ? 0 : (uint64_t)off;
    }
    c.printed = o->printed_before + n;
    rc = read_ckpt_store(a->checkpoint, &c, err, sizeof err);
    if (rc < 0) {
        read_ckpt_release(&c);
        cli_error("checkpoint", "%s", err);
        return -1;
    }
    /* Then keeps the position for the job's (sluice job checkpoint): after the file, which is
     * this read's own record, so the dispatcher never holds a position the file does not. */
    if (a->opts.job_name && heard &&
        sluice_iterator_keep(it, 0, c.pos, c.pos_len, err, sizeof err) < 0)
        cli_error("checkpoint",
                  "warning: the dispatcher did not keep this position for job '%s''s position: "
                  "%s",
                  a->opts.job_name, err);
    read_ckpt_release(&c);
    return 0;
}

/* Reads and prints until the end, the limit, an error or a signal. Returns the exit status. */
static int read_all(struct sluice_iterator *it, const struct read_args *a, struct read_out *o)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct pipe_buf out = {0};
    static char iobuf[1 << 16];
    setvbuf(o->f, iobuf, _IOFBF, sizeof(iobuf));
    int status = CLI_EXIT_FAIL;
    unsigned long long n = 0;
    unsigned long long every = a->checkpoint_every ? a->checkpoint_every : 100000;
    struct progress pr;
    progress_start(&pr,
                   a->quiet                ? PROGRESS_OFF
                   : a->progress           ? PROGRESS_LINES
                   : isatty(STDERR_FILENO) ? PROGRESS_LIVE
                                           : PROGRESS_OFF,
                   stderr);
    struct sluice_read_progress rp = {0};
    /* The first checkpoint at once: a read that cannot be checkpointed fails before it prints
     * anything, and one killed before the next checkpoint resumes from here. */
    if (a->checkpoint && save_checkpoint(it, a, o, 0) < 0)
        goto done_unsaved;
    uint32_t timeout = (uint32_t)a->timeout_ms;
    /* When the current wait for an element began (ms), 0 while elements arrive: the clock is
     * read only while the read waits, never per element. */
    uint64_t stalled_since = 0;
    unsigned notes = 0;
    while (!a->has_limit || n < a->limit) {
        const struct sluice_element *elem;
        /* Short waits, so that a long one is explained (wait.h) and bounded by --timeout-ms. */
        uint64_t waited = stalled_since ? cli_now_ms() - stalled_since : 0;
        uint32_t slice = READ_SLICE_MS;
        if (timeout && timeout > waited && timeout - waited < slice)
            slice = (uint32_t)(timeout - waited);
        int rc = sluice_iterator_next(it, &elem, slice, err, sizeof(err));
        if (rc == SLUICE_ERR_TIMEOUT && !read_signal) {
            uint64_t now = cli_now_ms();
            if (!stalled_since)
                stalled_since = now > slice ? now - slice : 1; /* the wait began with the call */
            waited = now - stalled_since;
            char why[SLUICE_ERRMSG_SIZE] = "";
            /* Notes only for an obstacle: workers that are slow to produce are no news. */
            bool obstacle = sluice_iterator_waiting(it, why, sizeof why) == 1;
            if (timeout && waited >= timeout) {
                cli_error("read", "no progress for %" PRIu32 " ms: %s", timeout,
                          why[0] ? why : "no element arrived");
                goto done;
            }
            if (obstacle && wait_note_due(waited, notes)) {
                progress_clear(&pr);
                cli_wait_note(why, timeout);
                notes++;
            }
            continue;
        }
        stalled_since = 0;
        notes = 0;
        if (rc < 0) {
            if (read_signal && rc == SLUICE_ERR_CANCELLED) {
                /* Interrupted: what was printed stays printed; no count of a partial read. */
                fflush(o->f);
                status = CLI_EXIT_OK;
                goto done;
            }
            cli_error("read", "%s", err[0] ? err : sluice_strerror(rc));
            goto done;
        }
        if (rc == 0)
            break;
        n++;
        if (pr.mode != PROGRESS_OFF) {
            uint64_t nbytes = 0;
            for (size_t c = 0; c < sluice_element_num_components(elem); c++) {
                size_t b = 0;
                sluice_element_data(elem, c, &b);
                nbytes += b;
            }
            if (progress_element(&pr, nbytes)) {
                sluice_iterator_progress(it, &rp);
                progress_draw(&pr, rp.splits_done, rp.splits_total);
            }
        }
        if (!a->count_only) {
            out.len = 0;
            uint64_t round = 0, task = 0;
            if (a->rounds && sluice_iterator_round(it, &round, &task) == 0)
                fprintf(o->f, "%llu %llu ", (unsigned long long)round, (unsigned long long)task);
            if (pipe_format_elem(&out, elem) != 0) {
                cli_error("read", "%s", sluice_strerror(SLUICE_ERR_NOMEM));
                goto done;
            }
            fwrite(out.p, 1, out.len, o->f);
            fputc('\n', o->f);
        }
        if (a->checkpoint && n % every == 0 && save_checkpoint(it, a, o, n) < 0)
            goto done_unsaved;
    }
    if (a->count_only)
        fprintf(o->f, "%llu\n", n);
    if (fflush(o->f) != 0 || ferror(o->f)) {
        cli_error("output", "write to %s failed", a->output ? a->output : "standard output");
        goto done;
    }
    status = CLI_EXIT_OK;
done:
    sluice_iterator_progress(it, &rp);
    progress_finish(&pr, rp.splits_done, rp.splits_total);
    /* The loss is told, not failed (sluice_read_options.whole_copies). */
    if (rp.copies_cut > 0)
        cli_error("read",
                  "%" PRIu64 " cop%s cut short: %s lost in the middle (--whole-copies fails "
                  "the read instead)",
                  rp.copies_cut, rp.copies_cut == 1 ? "y" : "ies",
                  rp.copies_cut == 1 ? "its worker was" : "their workers were");
    /* At exit, whatever ended the read: the position of the last element printed. */
    if (a->checkpoint && save_checkpoint(it, a, o, n) < 0)
        status = CLI_EXIT_FAIL;
done_unsaved:
    pipe_buf_release(&out);
    return status;
}

/* Opens the output: standard output, or --output cut back to what a resumed checkpoint covers
 * (or emptied on a first run). Returns 0 or the exit status. */
static int open_output(const struct read_args *a, const struct read_ckpt *resumed,
                       struct read_out *o)
{
    struct stat st;
    if (!a->output) {
        o->f = stdout;
        o->regular = fstat(STDOUT_FILENO, &st) == 0 && S_ISREG(st.st_mode);
        return 0;
    }
    int fd = open(a->output, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        cli_error("output", "%s: %s", a->output, strerror(errno));
        return CLI_EXIT_FAIL;
    }
    uint64_t keep = resumed ? resumed->output_bytes : 0;
    if (fstat(fd, &st) < 0 || (S_ISREG(st.st_mode) && (uint64_t)st.st_size < keep)) {
        cli_error("output",
                  "%s holds fewer bytes than the checkpoint covers (%llu < %llu): it was "
                  "changed since, so the read cannot continue it",
                  a->output, (unsigned long long)st.st_size, (unsigned long long)keep);
        close(fd);
        return CLI_EXIT_FAIL;
    }
    o->regular = S_ISREG(st.st_mode);
    if (o->regular && (ftruncate(fd, (off_t)keep) < 0 || lseek(fd, 0, SEEK_END) < 0)) {
        cli_error("output", "%s: %s", a->output, strerror(errno));
        close(fd);
        return CLI_EXIT_FAIL;
    }
    o->f = fdopen(fd, "w");
    if (!o->f) {
        cli_error("output", "%s: %s", a->output, strerror(errno));
        close(fd);
        return CLI_EXIT_FAIL;
    }
    return 0;
}

int cli_read(int argc, char **argv)
{
    struct read_args a;
    memset(&a, 0, sizeof(a));
    a.opts.mode = SLUICE_PARALLEL_EPOCHS;
    a.hedge = -1;
    int status = parse_args(argc, argv, &a);
    if (status >= 0)
        return status;

    /* The client's thread inherits this mask, so the signals below reach this thread only and
     * the handler never runs beside a close. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    struct sluice_client *client = NULL;
    status = cli_open_client(a.dispatcher, (uint32_t)a.timeout_ms, a.plugins, a.nplugins,
                             &a.security, &client);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (status != CLI_EXIT_OK)
        return status;

    char err[SLUICE_ERRMSG_SIZE] = "";
    struct read_ckpt resumed = {0};
    if (a.checkpoint) {
        int rc = read_ckpt_load(a.checkpoint, &resumed, err, sizeof err);
        if (rc < 0) {
            cli_error("checkpoint", "%s", err);
            sluice_client_close(client);
            return CLI_EXIT_FAIL;
        }
        if (rc == 0 && !a.opts.pipeline && !a.opts.dataset_id) {
            cli_error("usage", "%s does not exist yet: give a PIPELINE or --dataset-id ID to start",
                      a.checkpoint);
            sluice_client_close(client);
            return CLI_EXIT_USAGE;
        }
        a.opts.restore = resumed.pos;
        a.opts.restore_len = resumed.pos_len;
    }
    struct read_out o = {.printed_before = resumed.printed};
    struct sluice_iterator *it = NULL;
    struct cli_wait wait;
    cli_wait_start(&wait, client, (uint32_t)a.timeout_ms);
    int rc = sluice_iterator_open(client, &a.opts, &it, err, sizeof(err));
    cli_wait_stop(&wait);
    if (rc) {
        if (rc == SLUICE_ERR_PARSE) {
            cli_error("pipeline", "%s", err);
            status = CLI_EXIT_USAGE;
        } else {
            cli_wait_error(&wait, "read", rc, err);
            status = rc == SLUICE_ERR_INVALID && !a.opts.restore ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
        }
        if (a.checkpoint && resumed.pos)
            fprintf(stderr, "sluice: the checkpoint is %s\n", a.checkpoint);
        sluice_client_close(client);
        read_ckpt_release(&resumed);
        return status;
    }
    status = open_output(&a, resumed.pos ? &resumed : NULL, &o);
    read_ckpt_release(&resumed);
    if (status != 0) {
        sluice_iterator_close(it);
        sluice_client_close(client);
        return status;
    }

    read_it = it;
    set_handlers(on_signal);
    status = read_all(it, &a, &o);
    set_handlers(SIG_DFL);
    read_it = NULL;

    if (o.f != stdout && fclose(o.f) != 0 && status == CLI_EXIT_OK) {
        cli_error("output", "write to %s failed: %s", a.output, strerror(errno));
        status = CLI_EXIT_FAIL;
    }
    sluice_iterator_close(it);
    sluice_client_close(client);
    if (read_signal)
        raise(read_signal);
    return status;
}
