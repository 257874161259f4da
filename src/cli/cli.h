/* The `sluice` command: one function per subcommand, each returning the process exit status
 * (0 success, 1 runtime failure, 2 bad usage or bad pipeline text) after printing any error as
 * one line "sluice: <what failed>: <why>" on stderr. */
#ifndef SLUICE_CLI_CLI_H
#define SLUICE_CLI_CLI_H

#define CLI_EXIT_OK 0
#define CLI_EXIT_FAIL 1
#define CLI_EXIT_USAGE 2

#include <stddef.h>
#include <stdint.h>

int cli_run(int argc, char **argv);
int cli_register(int argc, char **argv);
int cli_read(int argc, char **argv);
int cli_status(int argc, char **argv);
int cli_journal(int argc, char **argv);
int cli_snapshot(int argc, char **argv);
int cli_job(int argc, char **argv);

/* Most --plugin options one command takes. */
#define CLI_MAX_PLUGINS 16

struct sluice_client;
struct sluice_security_options;

/* Opens a client of the dispatcher at address (commands that talk to the service). On failure
 * prints the error as "sluice: <what>: <why>" and returns the exit status: 2 for a bad address
 * or a plugin that does not load, 1 otherwise. Returns 0 with *out on success. */
int cli_open_client(const char *dispatcher, uint32_t timeout_ms, const char *const *plugins,
                    size_t nplugins, const struct sluice_security_options *security,
                    struct sluice_client **out);

/* When argv[*i] is one of the client's security flags (--auth-token-file, --tls-cert, --tls-key,
 * --tls-ca), stores its value in sec, advances *i past it and returns 1; returns 0 for any other
 * argument, or prints a usage error and returns -1 for such a flag without a value. */
int cli_parse_security(int argc, char **argv, int *i, struct sluice_security_options *sec);

/* The usage lines of those flags. */
/* The usage lines of --dispatcher, for every command that talks to one. */
#define CLI_DISPATCHER_USAGE                                                                       \
    "  --dispatcher H:P    the dispatcher, HOST:PORT (or sluice://HOST:PORT); or its replicas,\n"  \
    "                      a comma-separated list H1:P,H2:P,H3:P, of which the command finds\n"    \
    "                      the leader (and follows it when another replica takes over)\n"
#define CLI_SECURITY_USAGE                                                                         \
    "  --auth-token-file F the cluster's shared secret (default: $SLUICE_AUTH_TOKEN_FILE)\n"       \
    "  --tls-ca F          speak TLS, verifying servers against this CA (PEM)\n"                   \
    "  --tls-cert F        a client certificate (PEM), for servers that ask for one\n"             \
    "  --tls-key F         its private key (PEM)\n"

/* The default of --timeout-ms, the same for every command that waits (read, register,
 * status): 0, no limit. A dispatcher restarting in fault-tolerant mode must not end a long read;
 * the commands say what they wait for instead (src/cli/wait.h). */
#define CLI_DEFAULT_TIMEOUT_MS 0

/* The usage lines of --timeout-ms. */
#define CLI_TIMEOUT_USAGE                                                                          \
    "  --timeout-ms N      give up after N ms without progress (no reply, no element): exit 1\n"   \
    "                      with what it waited for. Default 0: no limit, since a dispatcher\n"     \
    "                      may be restarting. Either way, what holds the command up (a\n"          \
    "                      dispatcher or worker out of reach, no worker) is printed on\n"          \
    "                      standard error after 2 s and every 10 s.\n"

/* Prints "sluice: <what>: <why>" on stderr. */
void cli_error(const char *what, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses a non-negative decimal integer option value. Returns 0 or -1. */
int cli_parse_u64(const char *text, unsigned long long *out);
/* Parses the value of --split-size (a count of elements, at least 1); prints the usage error
 * and returns -1 when it is not one. */
int cli_parse_split_size(const char *text, uint64_t *out);
/* Parses the value of --weight (a finite number above 0 and at most 1000000); prints the usage
 * error ("--weight takes a number above 0 and at most 1000000, not '-1'") and returns -1 when it
 * is not one. */
int cli_parse_weight(const char *text, double *out);
/* Checks the value of --worker-selector (common/labels.h); prints the usage error
 * ("--worker-selector: expected ',' at byte 7") and returns -1 when it does not parse. */
int cli_check_selector(const char *text);

#endif
