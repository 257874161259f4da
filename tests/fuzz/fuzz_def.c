/* Fuzzes the DatasetDef decoder with arbitrary bytes. It must never crash and must refuse with
 * SLUICE_ERR_CORRUPT; whatever it accepts must be a valid spec: re-encoding and decoding gives
 * an equal spec and stable bytes, and its canonical text parses back to an equal spec. */
#include "fuzz.h"

#include "common/error.h"
#include "pipeline/def.h"
#include "pipeline/dist.h"
#include "pipeline/source.h"
#include "pipeline/parse.h"
#include "pipeline/spec.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_def: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct pipe_spec *spec = NULL;
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = pipe_spec_decode(data, size, &spec, err, sizeof(err));
    if (rc != 0) {
        check(rc == SLUICE_ERR_CORRUPT && spec == NULL, "unexpected failure code");
        check(strncmp(err, "dataset definition: ", 20) == 0, "error without its prefix");
        return 0;
    }

    uint8_t *bytes = NULL, *bytes2 = NULL;
    size_t len = 0, len2 = 0;
    check(pipe_spec_encode(spec, &bytes, &len) == 0, "encode failed");
    struct pipe_spec *again = NULL;
    check(pipe_spec_decode(bytes, len, &again, err, sizeof(err)) == 0, "re-decode failed");
    check(pipe_spec_equal(spec, again), "encode/decode changed the spec");
    check(pipe_spec_encode(again, &bytes2, &len2) == 0, "second encode failed");
    check(len == len2 && memcmp(bytes, bytes2, len) == 0, "encoding is not stable");

    int n = pipe_spec_format(spec, NULL, 0);
    check(n >= 0, "format failed");
    char *text = malloc((size_t)n + 1);
    check(text != NULL, "out of memory");
    pipe_spec_format(spec, text, (size_t)n + 1);
    struct pipe_spec *parsed = NULL;
    rc = pipe_parse(text, &parsed, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "fuzz_def: \"%s\": %s\n", text, err);
    check(rc == 0, "canonical text of a decoded spec does not parse");
    check(pipe_spec_equal(spec, parsed), "canonical text parses to a different spec");

    /* The distributed_epoch analysis: it refuses only with UNSUPPORTED; what it accepts leaves
     * a reader's part that parses as a tail, and a view whose positions stay in the source. */
    struct pipe_dist d;
    rc = pipe_dist_analyze(spec, &d, err, sizeof(err));
    check(rc == 0 || rc == SLUICE_ERR_UNSUPPORTED, "analysis failed with an unexpected code");
    if (rc == 0) {
        check(d.cut <= spec->nops, "cut past the ops");
        if (d.cut < spec->nops) {
            char tail[4096];
            int tn = pipe_spec_format_ops(spec, d.cut, spec->nops, tail, sizeof tail);
            struct pipe_spec *ts = NULL;
            if (tn > 0 && (size_t)tn < sizeof tail) {
                check(pipe_parse_tail(tail, &ts, err, sizeof(err)) == 0,
                      "the reader's part does not parse");
                pipe_spec_free(ts);
            }
        }
        uint64_t split = pipe_dist_split_size(&d, 0, 1);
        check(split >= 1 && (d.quantum <= 1 || split % d.quantum == 0 || split == UINT64_MAX),
              "split size not a multiple of the batch quantum");
        uint64_t srclen =
            spec->source.kind == PIPE_SRC_RANGE
                ? pipe_range_len(spec->source.start, spec->source.stop, spec->source.step)
            : spec->source.kind == PIPE_SRC_LIST ? spec->source.nvalues
                                                 : 0;
        if (srclen > 0)
            for (uint64_t g = 0; g < d.len && g < 1000; g++)
                check(pipe_dist_index(&d, g) < srclen, "a view position outside the source");
    }

    pipe_spec_free(parsed);
    free(text);
    free(bytes2);
    free(bytes);
    pipe_spec_free(again);
    pipe_spec_free(spec);
    return 0;
}
