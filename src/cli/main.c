#include "cli.h"

#include "common/error.h"
#include "common/labels.h"
#include "common/security.h"
#include "sluice/sluice.h"

#ifdef SLUICE_WITH_PYTHON
#include "pyfn/embed.h"
#endif

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: sluice <command> [options]\n"
    "\n"
    "Runs sluice pipelines on this machine or with a sluice service: registers and reads\n"
    "datasets, saves snapshots of them, changes the weights of a running mix, shows what the\n"
    "dispatcher is doing, and reads, checks, backs up and restores a dispatcher's journal.\n"
    "\n"
    "commands:\n"
    "  run PIPELINE [--format text|count] [--limit N] [--plugin LIB.so]...\n"
    "      run a pipeline locally and print its elements\n"
    "  register --dispatcher H:P PIPELINE [--dataset-id ID] [--compression auto|none]\n"
    "      register a pipeline with the service and print its dataset id\n"
    "  read --dispatcher H:P (PIPELINE | --dataset-id ID) [options]\n"
    "      read a dataset's elements from the service and print them\n"
    "  status --dispatcher H:P [--json]\n"
    "      print the dispatcher's workers, datasets and jobs\n"
    "  snapshot save --dispatcher H:P --dataset-id ID --path DIR [--no-wait]\n"
    "      save a dataset's elements once into chunk files under DIR (and wait)\n"
    "  snapshot status --dispatcher H:P --path DIR [--json]\n"
    "      print where the save into DIR stands\n"
    "  job set-weights --dispatcher H:P --job NAME W1,W2,...\n"
    "      change the weights of the mix a job reads, for all its readers at one position\n"
    "  journal dump|verify|backup|restore --work-dir DIR [options]\n"
    "      print, check, back up or restore a fault-tolerant dispatcher's journal\n"
    "\n"
    "--dispatcher H:P takes the dispatcher's HOST:PORT, or the replicas of a dispatcher group\n"
    "as a comma-separated list (H1:P,H2:P,H3:P); the command finds the leader among them.\n"
    "\n"
    "Run 'sluice <command> --help' for a command's options, 'sluice --version' for the\n"
    "version.\n"
    "\n"
    "Exit status: 0 on success, 1 on a runtime failure, 2 on bad usage.\n";

void cli_error(const char *what, const char *fmt, ...)
{
    char why[SLUICE_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "sluice: %s: %s\n", what, why);
}

int cli_parse_u64(const char *text, unsigned long long *out)
{
    if (!text || !*text || *text == '-' || *text == '+')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_split_size(const char *text, uint64_t *out)
{
    unsigned long long v;
    if (cli_parse_u64(text, &v) != 0 || v == 0) {
        cli_error("usage", "--split-size takes a number of elements >= 1, not '%s'", text);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_weight(const char *text, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = text && *text ? strtod(text, &end) : 0;
    if (!text || !*text || errno || *end || !(v > 0 && v <= 1e6)) {
        cli_error("usage", "--weight takes a number above 0 and at most 1000000, not '%s'",
                  text ? text : "");
        return -1;
    }
    *out = v;
    return 0;
}

int cli_check_selector(const char *text)
{
    struct selector sel;
    char why[SLUICE_ERRMSG_SIZE];
    if (selector_parse(text, &sel, why, sizeof why) < 0) {
        cli_error("usage", "--worker-selector: %s", why);
        return -1;
    }
    return 0;
}

int cli_parse_security(int argc, char **argv, int *i, struct sluice_security_options *sec)
{
    const char *a = argv[*i];
    if (strcmp(a, "--insecure") == 0 || strncmp(a, "--", 2) != 0)
        return 0; /* --insecure is a server's */
    int k = security_parse_flag(sec, a, *i + 1 < argc ? argv[*i + 1] : NULL);
    if (k < 0) {
        cli_error("usage", "%s needs a %s", a,
                  strcmp(a, "--tls-worker-name") == 0 ? "name" : "file");
        return -1;
    }
    if (k == 0)
        return 0;
    *i += k - 1;
    return 1;
}

int cli_open_client(const char *dispatcher, uint32_t timeout_ms, const char *const *plugins,
                    size_t nplugins, const struct sluice_security_options *security,
                    struct sluice_client **out)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct sluice_client_options opts = {
        .dispatcher = dispatcher,
        .timeout_ms = timeout_ms,
        .plugins = plugins,
        .nplugins = nplugins,
    };
    if (security)
        opts.security = *security;
    int rc = sluice_client_open(&opts, out, err, sizeof(err));
    if (rc == 0)
        return CLI_EXIT_OK;
    if (rc == SLUICE_ERR_PLUGIN) {
        cli_error("plugin", "%s", err);
        return CLI_EXIT_USAGE;
    }
    if (strncmp(err, "auth-token-file ", 16) == 0 || strncmp(err, "tls-", 4) == 0) {
        /* The files of the security flags: the user's to fix. */
        fputs("sluice: ", stderr);
        fputs(err, stderr);
        fputc('\n', stderr);
        return CLI_EXIT_USAGE;
    }
    if (rc == SLUICE_ERR_INVALID) {
        cli_error("dispatcher", "%s", err);
        return CLI_EXIT_USAGE;
    }
    cli_error("client", "%s", err[0] ? err : sluice_strerror(rc));
    return CLI_EXIT_FAIL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return CLI_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage, stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("sluice %s\n", sluice_version());
        return CLI_EXIT_OK;
    }
#ifdef SLUICE_WITH_PYTHON
    /* py functions in `sluice run` and --local tails run in CPython, started by the first one;
     * their modules come from PYTHONPATH. */
    pyembed_install();
#endif
    if (strcmp(cmd, "run") == 0)
        return cli_run(argc - 1, argv + 1);
    if (strcmp(cmd, "register") == 0)
        return cli_register(argc - 1, argv + 1);
    if (strcmp(cmd, "read") == 0)
        return cli_read(argc - 1, argv + 1);
    if (strcmp(cmd, "status") == 0)
        return cli_status(argc - 1, argv + 1);
    if (strcmp(cmd, "journal") == 0)
        return cli_journal(argc - 1, argv + 1);
    if (strcmp(cmd, "snapshot") == 0)
        return cli_snapshot(argc - 1, argv + 1);
    if (strcmp(cmd, "job") == 0)
        return cli_job(argc - 1, argv + 1);
    cli_error("usage", "unknown command '%s' (try 'sluice --help')", cmd);
    return CLI_EXIT_USAGE;
}
