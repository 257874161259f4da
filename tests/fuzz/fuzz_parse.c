/* Fuzzes the pipeline parser with arbitrary text. Whatever parses must survive every conversion
 * unchanged: canonical text -> parse, encode -> decode, and clone, each giving an equal spec.
 * Whatever does not parse must be refused with SLUICE_ERR_PARSE and a "column C: ..." message. */
#include "fuzz.h"

#include "common/error.h"
#include "pipeline/def.h"
#include "pipeline/parse.h"
#include "pipeline/spec.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(int ok, const char *what, const char *text)
{
    if (!ok) {
        fprintf(stderr, "fuzz_parse: %s for input \"%s\"\n", what, text);
        abort();
    }
}

static char *format_alloc(const struct pipe_spec *spec)
{
    int n = pipe_spec_format(spec, NULL, 0);
    if (n < 0)
        abort();
    char *buf = malloc((size_t)n + 1);
    if (!buf || pipe_spec_format(spec, buf, (size_t)n + 1) != n)
        abort();
    return buf;
}

/* Parses text with parse (pipe_parse or pipe_parse_tail) and checks every round trip. */
static void run(const char *text, int (*parse)(const char *, struct pipe_spec **, char *, size_t))
{
    struct pipe_spec *spec = NULL;
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = parse(text, &spec, err, sizeof(err));
    if (rc != 0) {
        check(rc == SLUICE_ERR_PARSE && spec == NULL, "unexpected failure code", text);
        check(strncmp(err, "column ", 7) == 0, "error without a column", text);
        return;
    }

    char *canonical = format_alloc(spec);
    struct pipe_spec *again = NULL;
    /* A tail's canonical text carries a placeholder source, so it always reparses in full. */
    rc = pipe_parse(canonical, &again, err, sizeof(err));
    check(rc == 0, "canonical text does not parse", canonical);
    check(pipe_spec_equal(spec, again), "canonical text parses to a different spec", text);
    char *canonical2 = format_alloc(again);
    check(strcmp(canonical, canonical2) == 0, "canonical text is not stable", text);

    uint8_t *bytes = NULL;
    size_t len = 0;
    check(pipe_spec_encode(spec, &bytes, &len) == 0, "encode failed", text);
    struct pipe_spec *decoded = NULL;
    rc = pipe_spec_decode(bytes, len, &decoded, err, sizeof(err));
    check(rc == 0, "decode of an encoding failed", text);
    check(pipe_spec_equal(spec, decoded), "encode/decode changed the spec", text);

    struct pipe_spec *clone = NULL;
    check(pipe_spec_clone(spec, &clone) == 0, "clone failed", text);
    check(pipe_spec_equal(spec, clone), "clone differs", text);

    pipe_spec_free(clone);
    pipe_spec_free(decoded);
    free(bytes);
    free(canonical2);
    pipe_spec_free(again);
    free(canonical);
    pipe_spec_free(spec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    run(text, pipe_parse);
    run(text, pipe_parse_tail);
    free(text);
    return 0;
}
