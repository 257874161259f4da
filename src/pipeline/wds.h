/* WebDataset sample grouping: the pure part of the tar() source (docs/design.md §3).
 *
 * A WebDataset shard is a tar archive in which the members that share a key form one sample. The
 * key of a member is its path up to the first dot of its file name, the extension the rest after
 * that dot: "a/b/000123.jpg" has key "a/b/000123" and extension "jpg", "x.seg.png" key "x" and
 * extension "seg.png". A name whose file name has no dot, or starts with one, belongs to no sample.
 * The members of one sample are consecutive in the archive, so a sample ends where the key
 * changes.
 *
 * tar("GLOB", "jpg", "cls") asks for an element per sample made of the bytes of its "jpg" and
 * "cls" members, in that order. Members with other extensions are ignored; a sample none of
 * whose members is asked for (a shard's "__index__.json", say) is no element at all; a sample
 * that has some of the asked-for members but not all is an error naming its key and the first
 * missing extension, and so is a sample with two members of one asked-for extension.
 *
 * Everything here is a function of member names: no archive, no I/O. Not thread-safe; one
 * grouping belongs to one reader. */
#ifndef SLUICE_PIPELINE_WDS_H
#define SLUICE_PIPELINE_WDS_H

#include "element.h"

#include <stdbool.h>
#include <stddef.h>

/* Splits a member name into key name[0, *key_len) and extension *ext (a suffix of name). Returns
 * false, leaving the outputs unset, when the name belongs to no sample: its file name (after the
 * last '/') is empty, has no dot, or starts with one. */
bool pipe_wds_split(const char *name, size_t *key_len, const char **ext);

/* NULL when ext can be asked for in tar(); otherwise what was expected instead, as a phrase for
 * "expected ..., found ...": an extension must be non-empty, must not start with a dot (write
 * "jpg", not ".jpg") and must not contain '/'. */
const char *pipe_wds_ext_problem(const char *ext);

/* The sample being assembled. */
struct pipe_wds {
    char *const *exts; /* borrowed: the asked-for extensions, at most PIPE_MAX_COMPONENTS */
    size_t nexts;
    char *key; /* the current sample's key, NUL-terminated; valid while open */
    size_t key_cap;
    bool open;                      /* a sample has started */
    bool have[PIPE_MAX_COMPONENTS]; /* have[i]: the current sample has its exts[i] member */
    size_t nhave;
};

/* What to do with a member (see pipe_wds_feed). */
struct pipe_wds_step {
    /* The previous sample is complete: emit the members collected for it before storing this
     * member's bytes. */
    bool done;
    /* The component this member's bytes belong to, or -1 when its bytes are not wanted. */
    int take;
};

/* Starts a grouping over exts (borrowed; 1 to PIPE_MAX_COMPONENTS distinct extensions). */
void pipe_wds_init(struct pipe_wds *g, char *const *exts, size_t nexts);
/* Forgets the current sample, as at the start of a new shard. */
void pipe_wds_reset(struct pipe_wds *g);
void pipe_wds_release(struct pipe_wds *g);

/* Feeds the name of the next regular-file member of the shard, or NULL at the end of the shard,
 * and fills *step. Returns 0; SLUICE_ERR_INVALID with "sample KEY: missing member .EXT" or
 * "sample KEY: duplicate member .EXT" in err when the sample that ends here lacks an asked-for
 * member or this member repeats one; or SLUICE_ERR_NOMEM. After an error the grouping is reset. */
int pipe_wds_feed(struct pipe_wds *g, const char *name, struct pipe_wds_step *step, char *err,
                  size_t errlen);

#endif
