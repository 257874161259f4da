/* Feeds arbitrary bytes to the element codec as a reply payload; whatever decodes must encode
 * and decode back to an equal element. */
#include "fuzz.h"

#include "pipeline/codec.h"

#include <stdint.h>
#include <stdlib.h>

/* A broken property stops the fuzzer in every build type (assert is compiled out by NDEBUG). */
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    struct sluice_element e, back;
    pipe_elem_init(&e);
    pipe_elem_init(&back);
    struct pipe_buf scratch = {0}, out = {0};
    char err[SLUICE_ERRMSG_SIZE];
    size_t pos = 0;
    while (codec_next_elem(data, len, &pos, &e, &scratch, err, sizeof(err)) == 1) {
        out.len = 0;
        if (codec_append_elem(&out, &e, (len & 1) != 0, &scratch) != 0)
            break;
        size_t p2 = 0;
        int rc = codec_next_elem((uint8_t *)out.p, out.len, &p2, &back, &scratch, err, sizeof(err));
        CHECK(rc == 1);
        CHECK(pipe_elem_equal(&e, &back));
    }
    pipe_elem_release(&e);
    pipe_elem_release(&back);
    pipe_buf_release(&scratch);
    pipe_buf_release(&out);
    return 0;
}
