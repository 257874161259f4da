/* The element codec: elements as bytes on the wire (GetElementsReply.payload). Pure.
 *
 * One element record:
 *     u8 flags            bit 0: body is snappy-compressed; bit 1: tagged
 *     [varint seq, varint position]   only when tagged: the split the element came from and its
 *                                     position in that split (distributed_epoch)
 *     [varint raw_len]    only when compressed: the length of the uncompressed body
 *     body
 * One split end marker (distributed_epoch: follows the last element of a split):
 *     u8 flags = 0x04, varint seq, varint count   (the split had count elements)
 * where the uncompressed body is
 *     u8 ncomp, then per component: u8 dtype, u8 rank, rank x varint dim, then
 *       fixed-width dtypes: the values (little-endian, row-major, nvalues x size bytes);
 *       bytes: nvalues x varint length, then the strings concatenated.
 * A batch (a reply payload) is a sequence of records, each preceded by its varint length.
 *
 * The decoder is fed untrusted bytes: every length is checked against what is left and against
 * the limits below before anything is allocated; bad input is SLUICE_ERR_CORRUPT, never a
 * crash. */
#ifndef SLUICE_PIPELINE_CODEC_H
#define SLUICE_PIPELINE_CODEC_H

#include "element.h"
#include "format.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CODEC_MAX_ELEMENT (1ull << 30) /* 1 GiB decoded */

/* Appends one element record (with its varint length prefix) to out. With compress set, the
 * body is snappy-compressed when that makes it at least 1/8 smaller; otherwise stored raw.
 * scratch is a reusable buffer for the compressor. Returns 0 or SLUICE_ERR_NOMEM. */
int codec_append_elem(struct pipe_buf *out, const struct sluice_element *e, bool compress,
                      struct pipe_buf *scratch);

/* Where an element stands in its split. */
struct codec_tag {
    uint64_t seq; /* the split's position in the iteration's split sequence */
    uint64_t pos; /* the element's position in the split, from 0 */
};

/* codec_append_elem with a tag (tag NULL: untagged, the same bytes as codec_append_elem). */
int codec_append_tagged(struct pipe_buf *out, const struct sluice_element *e, bool compress,
                        struct pipe_buf *scratch, const struct codec_tag *tag);

/* Appends a split end marker record: split seq had count elements. Returns 0 or
 * SLUICE_ERR_NOMEM. */
int codec_append_split_end(struct pipe_buf *out, uint64_t seq, uint64_t count);

/* Appends a split start marker record: this production of split seq leaves out positions
 * [0, from), which other consumers received before (the split was produced again after its
 * worker died, or for a deterministic reader). Returns 0 or SLUICE_ERR_NOMEM. */
int codec_append_split_from(struct pipe_buf *out, uint64_t seq, uint64_t from);

/* Where codec_append_split left out a tensor's values. */
struct codec_split {
    size_t comp; /* the component whose values were left out */
    size_t at;   /* the offset in out where they belong */
    size_t len;  /* their size in bytes */
};

/* Appends one stored (uncompressed) element record with its length prefix, like
 * codec_append_elem without compression, except for the values of the component with the most
 * value bytes (the strings of a bytes tensor, the data of any other), provided it has at least
 * min_ext of them: those are not copied, and the record is out's new bytes with that
 * component's values inserted at split->at. This lets a writer send a large element from the
 * tensor's own buffer. Returns 1 (appended, *split set), 0 (no component is that large; out is
 * unchanged and the caller uses codec_append_elem), or SLUICE_ERR_NOMEM. */
int codec_append_split(struct pipe_buf *out, const struct sluice_element *e, size_t min_ext,
                       struct codec_split *split);
/* codec_append_split with a tag (NULL: untagged). */
int codec_append_split_tagged(struct pipe_buf *out, const struct sluice_element *e, size_t min_ext,
                              const struct codec_tag *tag, struct codec_split *split);
/* Whether codec_append_split would split e (cheap: no encoding). Inline: a worker asks for every
 * element it produces, and an element whose tensors are all shorter than min_ext (the value bytes
 * of a tensor never exceed its len) is told at a glance. */
bool codec_can_split_exact(const struct sluice_element *e, size_t min_ext);
static inline bool codec_can_split(const struct sluice_element *e, size_t min_ext)
{
    for (size_t c = 0; c < e->n; c++)
        if (e->t[c].len >= min_ext)
            return codec_can_split_exact(e, min_ext);
    return false;
}
/* Whether snappy saves at least an eighth on a sample of e's largest component (the one
 * codec_append_split would leave out): sample bytes from its middle, compressed into scratch.
 * True without trying when no component has min_ext bytes or the component is shorter than twice
 * the sample, so only large elements are judged by a sample; what codec_append_elem would then
 * make of the whole element is likely but not certain to agree. */
bool codec_sample_compresses(const struct sluice_element *e, size_t min_ext, size_t sample,
                             struct pipe_buf *scratch);

enum codec_record_kind {
    CODEC_NO_MORE = 0,
    CODEC_ELEMENT = 1,
    CODEC_SPLIT_END = 2,
    CODEC_SPLIT_FROM = 3
};

/* What a record said besides its element: for CODEC_ELEMENT, tagged tells whether it carried a
 * tag, and seq/pos are the tag; for CODEC_SPLIT_END, seq is the split and pos its count; for
 * CODEC_SPLIT_FROM, seq is the split and pos the first position the production sends. */
struct codec_mark {
    bool tagged;
    uint64_t seq;
    uint64_t pos;
};

/* Pad records: a record whose flags byte is a pad's is stepped over by every reader
 * (codec_next_record, codec_scan_record), whatever follows, and counts as no record. A writer
 * puts one before a record to move where that record's values land (a worker aligning a large
 * value in a shared region, GetElementsRequest.align_values). CODEC_ALIGN: the alignment it
 * aims for; CODEC_PAD_MAX: the longest pad made. */
#define CODEC_ALIGN 64u
#define CODEC_PAD_MAX 65u
/* The bytes of pad to put at offset at of a payload so that the byte skip bytes after the
 * padded position lands on a multiple of CODEC_ALIGN: 0 (already there) or 2 to CODEC_PAD_MAX
 * (a pad has at least 2 bytes). */
size_t codec_pad_len(uint64_t at, uint64_t skip);
/* A pad record of exactly n bytes, length prefix included (2 <= n <= CODEC_PAD_MAX), in static
 * memory; NULL for another n. */
const uint8_t *codec_pad_record(size_t n);

/* The fewest value bytes a component needs to be lent rather than copied (codec_next_record; a
 * lender may ask for more, pipe_lender.lend_min). */
#define CODEC_LEND_MIN 4096

/* Reads the next record of a batch at data[*pos..len) and advances *pos: CODEC_ELEMENT (into e,
 * reusing its buffers; *mark says whether it was tagged and how), CODEC_SPLIT_END or
 * CODEC_SPLIT_FROM (*mark holds the split and its count or first position; e is untouched),
 * CODEC_NO_MORE (no bytes left), or SLUICE_ERR_CORRUPT with a message in err.
 *
 * lender (NULL: every value is copied) is the memory data lies in: a component of an
 * uncompressed record with at least CODEC_LEND_MIN value bytes (or the lender's lend_min) (the
 * strings of a bytes tensor, whose offsets are e's own; a fixed-width tensor's values when aligned
 * in data to its dtype's size) is then left where it lies (pipe_tensor_lend) instead of copied.
 * Whatever e had lent before is given back first, lender or not. */
int codec_next_record(const uint8_t *data, size_t len, size_t *pos, struct sluice_element *e,
                      struct pipe_buf *scratch, struct pipe_lender *lender, struct codec_mark *mark,
                      char *err, size_t errlen);

/* Steps over the next record of a batch at data[*pos..len) without decoding its body: returns
 * CODEC_ELEMENT, CODEC_SPLIT_END or CODEC_SPLIT_FROM with *mark as codec_next_record gives it,
 * CODEC_NO_MORE, or SLUICE_ERR_CORRUPT when the record's framing, flags or tag are bad (its body is
 * checked only when decoded). */
int codec_scan_record(const uint8_t *data, size_t len, size_t *pos, struct codec_mark *mark);

/* Reads the next element of a batch (split markers are skipped, tags ignored) at
 * data[*pos..len) into e (reusing its buffers) and advances *pos. Returns 1 (an element), 0 (no
 * bytes left), or SLUICE_ERR_CORRUPT with a message in err. scratch is a reusable buffer for
 * decompression. Offsets in messages count from the start of data for stored records and from the
 * record's start for compressed ones. */
int codec_next_elem(const uint8_t *data, size_t len, size_t *pos, struct sluice_element *e,
                    struct pipe_buf *scratch, char *err, size_t errlen);

#endif
