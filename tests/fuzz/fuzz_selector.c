/* Fuzzes the label selector parser and the label checks with arbitrary text. A selector that
 * parses must survive a round trip (its canonical text parses to a selector with the same
 * canonical text) and match labels without crashing; one that does not parse must be refused
 * with SLUICE_ERR_INVALID and a message. The input's first line is the selector, the rest labels
 * (one a line), checked with labels_canonical and matched against the selector. */
#include "fuzz.h"

#include "common/error.h"
#include "common/labels.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_selector: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *nl = strchr(text, '\n');
    char *rest = nl ? nl + 1 : NULL;
    if (nl)
        *nl = '\0';

    static struct selector sel, again;
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = selector_parse(text, &sel, err, sizeof err);
    if (rc < 0) {
        check(rc == SLUICE_ERR_INVALID && err[0], "refused without SLUICE_ERR_INVALID and text");
    } else {
        char canon[SELECTOR_TEXT_MAX + 1], canon2[SELECTOR_TEXT_MAX + 1];
        size_t n = selector_format(&sel, canon, sizeof canon);
        check(n <= SELECTOR_TEXT_MAX, "canonical text over the limit");
        check(selector_parse(canon, &again, err, sizeof err) == 0, "canonical text refused");
        check(selector_format(&again, canon2, sizeof canon2) == n && strcmp(canon, canon2) == 0,
              "canonical text changed on a round trip");
    }

    const char *labels[LABELS_MAX + 1];
    size_t nlabels = 0;
    while (rest && nlabels < LABELS_MAX + 1) {
        labels[nlabels++] = rest;
        char *e = strchr(rest, '\n');
        if (e)
            *e = '\0';
        rest = e ? e + 1 : NULL;
    }
    char lc[LABELS_TEXT_MAX + 1];
    rc = labels_canonical(labels, nlabels, lc, sizeof lc, err, sizeof err);
    if (rc < 0) {
        check(rc == SLUICE_ERR_INVALID && err[0], "labels refused without a message");
    } else {
        check(labels_count(lc) == nlabels, "canonical labels miscounted");
        for (size_t i = 0; i < nlabels; i++) {
            char key[LABEL_KEY_MAX + 1];
            size_t k = strcspn(labels[i], "=");
            memcpy(key, labels[i], k);
            key[k] = '\0';
            const char *v;
            size_t vlen;
            check(labels_get(lc, key, &v, &vlen), "a label lost");
            check(vlen == strlen(labels[i] + k + 1) && memcmp(v, labels[i] + k + 1, vlen) == 0,
                  "a label's value changed");
        }
        if (selector_parse(text, &sel, err, sizeof err) == 0)
            (void)selector_matches(&sel, lc);
    }
    free(text);
    return 0;
}
