/* Worker labels and the label selectors of jobs (docs/operations.md "Pools and selectors"). Pure:
 * no allocation, no I/O, any thread.
 *
 * A label is KEY=VALUE. Keys and values are names (common/names.h: valid UTF-8, no control
 * character) that hold none of the characters the selector syntax uses: '=', '!', ',', '(', ')'
 * and white space. A key is 1 to LABEL_KEY_MAX bytes, a value 0 to LABEL_VALUE_MAX. A worker has
 * at most LABELS_MAX labels with distinct keys. A worker's labels travel and are stored as their
 * canonical text: "KEY=VALUE" sorted by key (bytewise) and joined with ',' ("" for none), which
 * the characters above keep unambiguous.
 *
 * A selector is a comma-separated list of requirements, all of which a worker's labels must meet
 * (Kubernetes' label selectors, set-based and equality-based):
 *   key=value, key==value   the label is there with that value
 *   key!=value              the label is not there, or has another value
 *   key in (v1,v2)          the label is there with one of the values
 *   key notin (v1,v2)       the label is not there, or has none of the values
 *   key                     the label is there
 *   !key                    the label is not there
 * White space around tokens is ignored. At most SELECTOR_REQS_MAX requirements, at most
 * LABEL_SET_MAX values in one list, at most SELECTOR_TEXT_MAX bytes. An empty selector (or one of
 * white space only) selects every worker. */
#ifndef SLUICE_COMMON_LABELS_H
#define SLUICE_COMMON_LABELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LABEL_KEY_MAX 63
#define LABEL_VALUE_MAX 63
#define LABELS_MAX 16
/* The longest canonical label text, without the NUL. */
#define LABELS_TEXT_MAX (LABELS_MAX * (LABEL_KEY_MAX + 1 + LABEL_VALUE_MAX + 1) - 1)
#define SELECTOR_TEXT_MAX 1023
#define SELECTOR_REQS_MAX 16
#define LABEL_SET_MAX 16

/* Checks one label "KEY=VALUE" (NUL-terminated). Returns 0, or SLUICE_ERR_INVALID with one of
 * these messages in err:
 *   "expected KEY=VALUE"                     (no '=')
 *   "empty key"
 *   "key: '!' is not allowed at byte 2"      (any of = ! , ( ) or white space; byte offsets count
 *                                             from the start of the key, or of the value)
 *   "key: not valid UTF-8 at byte 3"         (and the other messages of name_check)
 *   "key: 70 bytes, longer than the limit of 63"
 *   "value: ..."                             (the same for the value) */
int label_check(const char *kv, char *err, size_t errlen);

/* Builds the canonical text of the n labels (each "KEY=VALUE") into out (outlen bytes;
 * LABELS_TEXT_MAX + 1 always suffice). Returns 0, or SLUICE_ERR_INVALID with a message:
 *   "label 2: empty key"                     (label_check's message, 1-based position)
 *   "more than 16 labels"
 *   "label key pool given twice"
 * SLUICE_ERR_INVALID "labels: longer than the buffer" when out is too small. */
int labels_canonical(const char *const *labels, size_t n, char *out, size_t outlen, char *err,
                     size_t errlen);

/* Whether canon (a canonical label text) has the label key; its value (not NUL-terminated) in
 * *value and *value_len when it has. */
bool labels_get(const char *canon, const char *key, const char **value, size_t *value_len);

/* The number of labels in canon. */
size_t labels_count(const char *canon);

enum selector_op {
    SELECTOR_EQ = 1,
    SELECTOR_NE = 2,
    SELECTOR_IN = 3,
    SELECTOR_NOTIN = 4,
    SELECTOR_EXISTS = 5,
    SELECTOR_NOT_EXISTS = 6
};

/* A parsed selector. Keys and values are offsets of NUL-terminated strings in buf, so the struct
 * may be copied with memcpy. */
struct selector_req {
    enum selector_op op;
    uint16_t key;
    uint16_t nvalues;
    uint16_t values[LABEL_SET_MAX];
};

struct selector {
    size_t n;
    struct selector_req req[SELECTOR_REQS_MAX];
    char buf[SELECTOR_TEXT_MAX + 2];
};

/* Parses text (NUL-terminated) into *out. Returns 0, or SLUICE_ERR_INVALID with a message whose
 * byte offsets count from the start of text:
 *   "longer than the limit of 1023 bytes"       (the text, or its canonical form)
 *   "empty requirement at byte 4"               (",," or a trailing ',')
 *   "expected a label key at byte 0"
 *   "expected '=', '!=', 'in' or 'notin' at byte 5"
 *   "expected '(' at byte 8"
 *   "expected ',' or ')' at byte 12"
 *   "expected a value at byte 9"                (in a list: "(a,)" or "()")
 *   "expected ',' at byte 7"                    (something after a whole requirement)
 *   "more than 16 requirements", "more than 16 values at byte 10"
 *   "key at byte 0: not valid UTF-8 at byte 2"  (name_check's messages, offsets in the token)
 *   "value at byte 5: 64 bytes, longer than the limit of 63" */
int selector_parse(const char *text, struct selector *out, char *err, size_t errlen);

/* Whether the labels of canon (a canonical label text) meet every requirement of sel. */
bool selector_matches(const struct selector *sel, const char *canon);

/* The canonical text of sel into out (outlen bytes, NUL-terminated, cut when too small):
 * requirements in their order, joined with ',', as "k=v", "k!=v", "k in (a,b)", "k notin (a,b)",
 * "k", "!k". Parsing it gives the same selector. Returns the length the whole text needs, which
 * for a selector from selector_parse is at most SELECTOR_TEXT_MAX (the parser refuses one whose
 * canonical text would be longer). */
size_t selector_format(const struct selector *sel, char *out, size_t outlen);

#endif
