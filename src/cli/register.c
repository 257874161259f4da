/* sluice register: registers a pipeline with the dispatcher and prints its dataset id. */
#include "cli.h"
#include "wait.h"

#include "common/error.h"
#include "sluice/sluice.h"

#include <stdio.h>
#include <string.h>

static const char register_usage[] =
    "usage: sluice register --dispatcher H:P PIPELINE [--dataset-id ID]\n"
    "                       [--compression auto|none] [--split-size N] [--deterministic]\n"
    "                       [--timeout-ms N]\n"
    "                       [--plugin LIB.so]... [--auth-token-file F]\n"
    "                       [--tls-ca F [--tls-cert F --tls-key F]]\n"
    "\n"
    "Checks PIPELINE, registers it with the dispatcher and prints the dataset id. With\n"
    "--dataset-id the dataset gets that id (UTF-8 without control characters, at most 127\n"
    "bytes; registering the same pipeline under it again is fine; another pipeline is\n"
    "refused); otherwise the dispatcher picks one. The dispatcher may refuse a pipeline\n"
    "over its --max-pipeline-bytes, or a dataset past its --max-datasets. --compression\n"
    "auto (the default) lets workers compress elements when it pays. --split-size sets the\n"
    "elements per split of a range or list source in distributed_epoch (default: about 1/256\n"
    "of the source, 16 to 16384, rounded up to a multiple of the workers' batch). An unreachable\n"
    "dispatcher is retried (see --timeout-ms). --deterministic\n"
    "makes distributed_epoch reads of the dataset deterministic by default (see 'sluice read\n"
    "--help'); it is part of the dataset's identity. --plugin loads a\n"
    "shared object whose functions the pipeline uses (workers need it too).\n"
    "\n" CLI_TIMEOUT_USAGE CLI_DISPATCHER_USAGE CLI_SECURITY_USAGE "\n"
    "example: sluice register --dispatcher 127.0.0.1:5050 'range(100) | map(square)'\n";

int cli_register(int argc, char **argv)
{
    const char *dispatcher = NULL, *text = NULL, *dataset_id = NULL;
    enum sluice_compression compression = SLUICE_COMPRESSION_AUTO;
    unsigned long long timeout_ms = CLI_DEFAULT_TIMEOUT_MS;
    uint64_t split_size = 0;
    bool deterministic = false;
    const char *plugins[CLI_MAX_PLUGINS];
    size_t nplugins = 0;

    struct sluice_security_options security = {0};
    int k;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(register_usage, stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(a, "--dispatcher") == 0 && i + 1 < argc) {
            dispatcher = argv[++i];
        } else if (strcmp(a, "--dataset-id") == 0 && i + 1 < argc) {
            dataset_id = argv[++i];
            if (!*dataset_id) {
                cli_error("usage", "--dataset-id takes a non-empty id");
                return CLI_EXIT_USAGE;
            }
        } else if (strcmp(a, "--compression") == 0 && i + 1 < argc) {
            const char *c = argv[++i];
            if (strcmp(c, "auto") == 0) {
                compression = SLUICE_COMPRESSION_AUTO;
            } else if (strcmp(c, "none") == 0) {
                compression = SLUICE_COMPRESSION_NONE;
            } else {
                cli_error("usage", "--compression takes auto or none, not '%s'", c);
                return CLI_EXIT_USAGE;
            }
        } else if (strcmp(a, "--split-size") == 0 && i + 1 < argc) {
            if (cli_parse_split_size(argv[++i], &split_size) != 0)
                return CLI_EXIT_USAGE;
        } else if (strcmp(a, "--deterministic") == 0) {
            deterministic = true;
        } else if (strcmp(a, "--timeout-ms") == 0 && i + 1 < argc) {
            if (cli_parse_u64(argv[++i], &timeout_ms) != 0 || timeout_ms > UINT32_MAX) {
                cli_error("usage", "--timeout-ms takes a number of milliseconds, not '%s'",
                          argv[i]);
                return CLI_EXIT_USAGE;
            }
        } else if (strcmp(a, "--plugin") == 0 && i + 1 < argc) {
            if (nplugins == CLI_MAX_PLUGINS) {
                cli_error("usage", "at most %d --plugin options", CLI_MAX_PLUGINS);
                return CLI_EXIT_USAGE;
            }
            plugins[nplugins++] = argv[++i];
        } else if ((k = cli_parse_security(argc, argv, &i, &security)) != 0) {
            if (k < 0)
                return CLI_EXIT_USAGE;
        } else if (a[0] == '-' && a[1] == '-') {
            cli_error("usage", "unknown or incomplete option '%s' (try 'sluice register --help')",
                      a);
            return CLI_EXIT_USAGE;
        } else if (!text) {
            text = a;
        } else {
            cli_error("usage", "one PIPELINE expected; unexpected '%s'", a);
            return CLI_EXIT_USAGE;
        }
    }
    if (!text) {
        fputs(register_usage, stderr);
        return CLI_EXIT_USAGE;
    }
    if (!dispatcher) {
        cli_error("usage", "--dispatcher H:P is required (try 'sluice register --help')");
        return CLI_EXIT_USAGE;
    }

    struct sluice_client *client = NULL;
    int status =
        cli_open_client(dispatcher, (uint32_t)timeout_ms, plugins, nplugins, &security, &client);
    if (status != CLI_EXIT_OK)
        return status;

    char err[SLUICE_ERRMSG_SIZE] = "";
    char id[256];
    struct sluice_register_options opts = {.dataset_id = dataset_id,
                                           .compression = compression,
                                           .split_size = split_size,
                                           .deterministic = deterministic};
    struct cli_wait wait;
    cli_wait_start(&wait, client, (uint32_t)timeout_ms);
    int rc = sluice_register(client, text, &opts, id, sizeof(id), err, sizeof(err));
    cli_wait_stop(&wait);
    if (rc == SLUICE_ERR_PARSE) {
        cli_error("pipeline", "%s", err);
        status = CLI_EXIT_USAGE;
    } else if (rc) {
        cli_wait_error(&wait, "register", rc, err);
        status = CLI_EXIT_FAIL;
    } else {
        printf("%s\n", id);
        if (fflush(stdout) != 0 || ferror(stdout)) {
            cli_error("output", "write to standard output failed");
            status = CLI_EXIT_FAIL;
        }
    }
    sluice_client_close(client);
    return status;
}
