/* Pipelines in tests: texts parsed or failing the test, runs read whole as text. */
#ifndef SLUICE_TESTS_LIB_PIPELINE_H
#define SLUICE_TESTS_LIB_PIPELINE_H

struct pipe_run;
struct pipe_spec;

/* Parses text (pipe_parse); fails the test, naming the text and the parser's message, when it
 * does not parse. The caller frees the result with pipe_spec_free. */
struct pipe_spec *pipeline_parse(const char *text);

/* Reads run to its end and returns its elements as text (malloc'd): each formatted by
 * pipe_format_elem on a line of its own, then, when the run fails, "ERR " and the run's message
 * (no newline). *rc, when rc is not NULL, is the last result of pipe_run_next: 0 or the
 * failure. */
char *pipeline_text(struct pipe_run *run, int *rc);

#endif
