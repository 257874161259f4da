/* sluice job set-weights (docs/pipelines.md "Mixing datasets"): changes the weights of the mix
 * a named distributed_epoch job reads, for every reader of the job from one output position on.
 * The weights are checked here before any dispatcher is asked; the dispatcher checks their count
 * against the mix's inputs and the position, journals the change and answers where it applies.
 *
 * sluice job checkpoint (docs/snapshots.md "The job's position"): takes a named job's position
 * from the dispatcher (sluice_job_checkpoint) into a checkpoint file `sluice read --checkpoint`
 * restores. */
#include "cli.h"
#include "read_checkpoint.h"
#include "wait.h"

#include "client/mixweights.h"
#include "common/error.h"
#include "common/names.h"
#include "pipeline/format.h"
#include "sluice/sluice.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char job_usage[] =
    "usage: sluice job set-weights --dispatcher H:P --job NAME [--dataset-id ID] [--at N]\n"
    "                              [--timeout-ms N] [security options] W1,W2,...\n"
    "       sluice job checkpoint --dispatcher H:P --job NAME [--step N] --output FILE\n"
    "                             [--timeout-ms N] [security options]\n"
    "\n"
    "set-weights: changes the weights of the sample_from_datasets read as the distributed_epoch\n"
    "job NAME: every reader of the job draws with W1,W2,... (one per input of the mix, each a\n"
    "finite number >= 0, not all 0) from one output position on, the same for every reader.\n"
    "The change is journaled, and a read resumed from a checkpoint replays it at the same\n"
    "position. Prints 'job NAME: weights W1, W2, ... from position N (dataset ID)'. Weights\n"
    "that are not such numbers exit 2; a refusal of the dispatcher (no mix read as NAME, a\n"
    "weight count other than the mix's inputs, a position already passed) exits 1 with its\n"
    "reason.\n"
    "\n"
    "  --job NAME        the job the mix is read as (its readers' job name)\n"
    "  --dataset-id ID   the mix's dataset, when NAME has read more than one mix\n"
    "  --at N            the output position to change at (>= 1), refused when a reader may\n"
    "                    already have passed it. Default: the first position no reader may\n"
    "                    have passed.\n"
    "  --timeout-ms N    give up after N ms waiting for the dispatcher; exit 1. Default 0: no\n"
    "                    limit.\n" CLI_DISPATCHER_USAGE CLI_SECURITY_USAGE "\n"
    "checkpoint: writes the position of the shared distributed_epoch job NAME to FILE: the\n"
    "merge of the positions its readers kept with the dispatcher at their checkpoints (each\n"
    "`sluice read --job-name NAME --checkpoint F` keeps one at every checkpoint it writes, a\n"
    "Python reader at every state_dict()), each reader's of the latest step at or below the cut.\n"
    "Works after the readers died. Each of any number of readers of one new job continues from\n"
    "a copy of FILE (`sluice read --job-name NEW --checkpoint COPY`): together they read every\n"
    "element no reader had before the cut, each once. Prints 'job NAME: position at step N of\n"
    "K bytes written to FILE'. Nothing kept for NAME exits 1.\n"
    "\n"
    "  --step N|latest   the cut: each reader's latest step at or below N. Default: the latest\n"
    "                    step every reader still reading has reached (a reader's steps count its\n"
    "                    checkpoints), for trainers that checkpoint in step; 'latest': each\n"
    "                    reader's latest, for readers that each keep their own output (as\n"
    "                    separate `sluice read` processes do).\n"
    "  --output FILE     where the checkpoint goes (replaced atomically)\n"
    "\n"
    "examples:\n"
    "  sluice job set-weights --dispatcher 127.0.0.1:5050 --job train 0.5,0.3,0.2\n"
    "  sluice job checkpoint --dispatcher 127.0.0.1:5050 --job train --output job.ckpt\n";

struct job_args {
    bool checkpoint; /* the checkpoint command (else set-weights) */
    const char *dispatcher, *job_name, *dataset_id, *weights, *output;
    unsigned long long at, step, timeout_ms;
    struct sluice_security_options security;
};

/* Returns -1 to go on, else the exit status. */
static int parse(int argc, char **argv, struct job_args *a)
{
    int k;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            fputs(job_usage, stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(s, "--dispatcher") == 0 && i + 1 < argc) {
            a->dispatcher = argv[++i];
        } else if (strcmp(s, "--job") == 0 && i + 1 < argc) {
            a->job_name = argv[++i];
        } else if (strcmp(s, "--dataset-id") == 0 && i + 1 < argc && !a->checkpoint) {
            a->dataset_id = argv[++i];
        } else if (strcmp(s, "--output") == 0 && i + 1 < argc && a->checkpoint) {
            a->output = argv[++i];
        } else if (strcmp(s, "--step") == 0 && i + 1 < argc && a->checkpoint) {
            if (strcmp(argv[++i], "latest") == 0) {
                a->step = SLUICE_JOB_STEP_LATEST;
            } else if (cli_parse_u64(argv[i], &a->step) != 0 || a->step == 0 ||
                       a->step > SLUICE_JOB_STEP_LATEST) {
                cli_error("usage", "--step takes a step from 1 to 2^62 or 'latest', not '%s'",
                          argv[i]);
                return CLI_EXIT_USAGE;
            }
        } else if (strcmp(s, "--at") == 0 && i + 1 < argc && !a->checkpoint) {
            if (cli_parse_u64(argv[++i], &a->at) != 0 || a->at == 0) {
                cli_error("usage", "--at takes an output position >= 1, not '%s'", argv[i]);
                return CLI_EXIT_USAGE;
            }
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
            cli_error("usage", "unknown or incomplete option '%s' (try 'sluice job --help')", s);
            return CLI_EXIT_USAGE;
        } else if (!a->weights && !a->checkpoint) {
            /* A negative weight ("-1,2") is the weights too; the check below refuses it. */
            a->weights = s;
        } else {
            cli_error("usage", "one W1,W2,... expected; unexpected '%s' (try 'sluice job --help')",
                      s);
            return CLI_EXIT_USAGE;
        }
    }
    if (a->checkpoint && (!a->dispatcher || !a->job_name || !a->output)) {
        cli_error("usage", "--dispatcher H:P, --job NAME and --output FILE are required (try "
                           "'sluice job --help')");
        return CLI_EXIT_USAGE;
    }
    if (!a->checkpoint && (!a->dispatcher || !a->job_name || !a->weights)) {
        cli_error("usage",
                  "--dispatcher H:P, --job NAME and the weights W1,W2,... are required (try "
                  "'sluice job --help')");
        return CLI_EXIT_USAGE;
    }
    return -1;
}

/* Parses "W1,W2,..." into a malloc'd array (*out, *n): every entry a whole number text for
 * strtod, none empty. Otherwise prints the error and returns the exit status. */
static int parse_weights(const char *text, double **out, size_t *n)
{
    size_t count = 1;
    for (const char *p = text; *p; p++)
        count += *p == ',';
    double *w = malloc(count * sizeof *w);
    if (!w) {
        cli_error("weights", "%s", sluice_strerror(SLUICE_ERR_NOMEM));
        return CLI_EXIT_FAIL;
    }
    const char *p = text;
    for (size_t i = 0; i < count; i++) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0) {
            cli_error("usage", "weights: entry %zu of '%s' is empty", i, text);
            goto fail;
        }
        /* strtod stops at the comma; the entry must be all of one number, no spaces around. */
        char *end = (char *)p;
        errno = 0;
        double v = isspace((unsigned char)p[0]) ? 0 : strtod(p, &end);
        if (end != p + len) {
            cli_error("usage", "weights: '%.*s' is not a number", (int)len, p);
            goto fail;
        }
        if (errno == ERANGE && isinf(v)) {
            cli_error("usage", "weights: '%.*s' is out of range", (int)len, p);
            goto fail;
        }
        w[i] = v;
        p += len + 1;
    }
    *out = w;
    *n = count;
    return CLI_EXIT_OK;
fail:
    free(w);
    return CLI_EXIT_USAGE;
}

static int flush_stdout(void)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("output", "write to standard output failed");
        return CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}

static void print_result(const char *job_name, const double *w, size_t n,
                         const struct mixweights_reply *r)
{
    printf("job %s: weights ", job_name);
    for (size_t i = 0; i < n; i++) {
        char num[PIPE_FLOAT_BUF];
        pipe_format_f64(w[i] == 0 ? 0 : w[i], num); /* 0, not -0: what was sent */
        printf("%s%s", i ? ", " : "", num);
    }
    printf(" from position %llu", (unsigned long long)r->from);
    if (r->dataset_id[0]) {
        /* The dispatcher's text: printed on one line whatever it holds. */
        char id[4 * sizeof r->dataset_id];
        name_escape(r->dataset_id, id, sizeof id);
        printf(" (dataset %s)", id);
    }
    putchar('\n');
}

/* Asks the dispatcher and prints the answer; w holds n checked weights. */
static int send_weights(const struct job_args *a, const double *w, size_t n)
{
    struct sluice_client *client = NULL;
    int status =
        cli_open_client(a->dispatcher, (uint32_t)a->timeout_ms, NULL, 0, &a->security, &client);
    if (status != CLI_EXIT_OK)
        return status;
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct mixweights_reply reply;
    struct cli_wait wait;
    cli_wait_start(&wait, client, (uint32_t)a->timeout_ms);
    int rc =
        mixweights_set(client, a->job_name, a->dataset_id, w, n, a->at, &reply, err, sizeof err);
    cli_wait_stop(&wait);
    if (rc < 0) {
        cli_wait_error(&wait, "job set-weights", rc, err);
        status = CLI_EXIT_FAIL;
    } else {
        print_result(a->job_name, w, n, &reply);
        status = flush_stdout();
    }
    sluice_client_close(client);
    return status;
}

static int set_weights(const struct job_args *a)
{
    double *w = NULL;
    size_t n = 0;
    int status = parse_weights(a->weights, &w, &n);
    if (status != CLI_EXIT_OK)
        return status;
    char err[SLUICE_ERRMSG_SIZE] = "";
    if (mixweights_check(a->job_name, a->dataset_id, w, n, err, sizeof err) < 0) {
        cli_error("usage", "%s", err);
        status = CLI_EXIT_USAGE;
    } else {
        status = send_weights(a, w, n);
    }
    free(w);
    return status;
}

static int take_checkpoint(const struct job_args *a)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    if (name_check("job name", a->job_name, NAME_ID_MAX, err, sizeof err) < 0 || !a->job_name[0]) {
        cli_error("usage", "%s", err[0] ? err : "a job name is required");
        return CLI_EXIT_USAGE;
    }
    struct sluice_client *client = NULL;
    int status =
        cli_open_client(a->dispatcher, (uint32_t)a->timeout_ms, NULL, 0, &a->security, &client);
    if (status != CLI_EXIT_OK)
        return status;
    struct read_ckpt c = {0};
    uint64_t cut = 0;
    struct cli_wait wait;
    cli_wait_start(&wait, client, (uint32_t)a->timeout_ms);
    int rc = sluice_job_checkpoint(client, a->job_name, a->step, &c.pos, &c.pos_len, &cut, err,
                                   sizeof err);
    cli_wait_stop(&wait);
    if (rc < 0) {
        cli_wait_error(&wait, "job checkpoint", rc, err);
        status = CLI_EXIT_FAIL;
    } else if ((rc = read_ckpt_store(a->output, &c, err, sizeof err)) < 0) {
        cli_error("checkpoint", "%s", err);
        status = CLI_EXIT_FAIL;
    } else {
        printf("job %s: position at step %llu of %zu bytes written to %s\n", a->job_name,
               (unsigned long long)cut, c.pos_len, a->output);
        status = flush_stdout();
    }
    read_ckpt_release(&c);
    sluice_client_close(client);
    return status;
}

/* The subcommand: the first argument that is neither an option, an option's value nor a
 * negative number (the weights), so that `sluice job --dispatcher H:P set-weights ...` works as
 * well. Returns its index or 0. */
static int find_command(int argc, char **argv)
{
    static const char *const with_value[] = {
        "--dispatcher", "--job",     "--dataset-id", "--at",
        "--timeout-ms", "--step",    "--output",     "--auth-token-file",
        "--tls-cert",   "--tls-key", "--tls-ca",     NULL};
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

int cli_job(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(job_usage, stdout);
            return CLI_EXIT_OK;
        }
    }
    int at = find_command(argc, argv);
    if (at == 0) {
        cli_error("usage", "sluice job set-weights|checkpoint (try 'sluice job --help')");
        return CLI_EXIT_USAGE;
    }
    bool checkpoint = strcmp(argv[at], "checkpoint") == 0;
    if (!checkpoint && strcmp(argv[at], "set-weights") != 0) {
        cli_error("usage", "unknown job command '%s' (try 'sluice job --help')", argv[at]);
        return CLI_EXIT_USAGE;
    }
    /* The options and the weights, without the subcommand. */
    char *args[64];
    int n = 0;
    for (int i = 0; i < argc && n < 63; i++) {
        if (i != at)
            args[n++] = argv[i];
    }
    args[n] = NULL;
    struct job_args a = {.timeout_ms = CLI_DEFAULT_TIMEOUT_MS, .checkpoint = checkpoint};
    int status = parse(n, args, &a);
    if (status >= 0)
        return status;
    return checkpoint ? take_checkpoint(&a) : set_weights(&a);
}
