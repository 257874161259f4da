/* sluice status: prints the dispatcher's status document, as JSON or as tables. */
#include "cli.h"
#include "wait.h"

#include "client/status_json.h"
#include "common/error.h"
#include "sluice/sluice.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char status_usage[] =
    "usage: sluice status --dispatcher H:P [--json] [--timeout-ms N] [--auth-token-file F]\n"
    "                     [--tls-ca F [--tls-cert F --tls-key F]]\n"
    "\n"
    "Prints the dispatcher's workers (address, incarnation, tasks), datasets (id, pipeline)\n"
    "and jobs (id, name, dataset, mode, state, clients, tasks) as tables, or with --json the\n"
    "dispatcher's status document as it is (one JSON object). An unreachable\n"
    "dispatcher is retried (see --timeout-ms).\n"
    "\n" CLI_TIMEOUT_USAGE CLI_SECURITY_USAGE;

int cli_status(int argc, char **argv)
{
    const char *dispatcher = NULL;
    bool as_json = false;
    unsigned long long timeout_ms = CLI_DEFAULT_TIMEOUT_MS;

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

    struct sluice_client *client = NULL;
    int status = cli_open_client(dispatcher, (uint32_t)timeout_ms, NULL, 0, &security, &client);
    if (status != CLI_EXIT_OK)
        return status;

    char err[1024] = "";
    char *json = NULL, *table = NULL;
    struct cli_wait wait;
    cli_wait_start(&wait, client, (uint32_t)timeout_ms);
    int rc = sluice_status(client, &json, err, sizeof(err));
    cli_wait_stop(&wait);
    if (rc) {
        cli_wait_error(&wait, "status", rc, err);
        status = CLI_EXIT_FAIL;
        goto done;
    }
    if (as_json) {
        size_t len = strlen(json);
        fputs(json, stdout);
        if (len == 0 || json[len - 1] != '\n')
            fputc('\n', stdout);
    } else {
        rc = status_json_table(json, &table, err, sizeof(err));
        if (rc) {
            cli_error("status", "%s", err);
            status = CLI_EXIT_FAIL;
            goto done;
        }
        fputs(table, stdout);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("output", "write to standard output failed");
        status = CLI_EXIT_FAIL;
    }
done:
    free(table);
    free(json);
    sluice_client_close(client);
    return status;
}
