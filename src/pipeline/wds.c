/* WebDataset sample grouping (see wds.h): member names in, "emit the sample" and "keep this
 * member's bytes as component i" out. */
#include "wds.h"

#include "common/error.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

bool pipe_wds_split(const char *name, size_t *key_len, const char **ext)
{
    const char *slash = strrchr(name, '/');
    const char *base = slash ? slash + 1 : name;
    if (*base == '\0' || *base == '.')
        return false;
    const char *dot = strchr(base, '.');
    if (!dot)
        return false;
    *key_len = (size_t)(dot - name);
    *ext = dot + 1;
    return true;
}

const char *pipe_wds_ext_problem(const char *ext)
{
    if (ext[0] == '\0')
        return "a non-empty extension";
    if (ext[0] == '.')
        return "an extension without a leading dot";
    if (strchr(ext, '/'))
        return "an extension without '/'";
    return NULL;
}

void pipe_wds_init(struct pipe_wds *g, char *const *exts, size_t nexts)
{
    assert(nexts >= 1 && nexts <= PIPE_MAX_COMPONENTS);
    memset(g, 0, sizeof *g);
    g->exts = exts;
    g->nexts = nexts;
}

void pipe_wds_reset(struct pipe_wds *g)
{
    g->open = false;
    memset(g->have, 0, sizeof g->have);
    g->nhave = 0;
}

void pipe_wds_release(struct pipe_wds *g)
{
    free(g->key);
    g->key = NULL;
    g->key_cap = 0;
    pipe_wds_reset(g);
}

/* Starts a sample with key name[0, len). */
static int start_sample(struct pipe_wds *g, const char *name, size_t len)
{
    if (len + 1 > g->key_cap) {
        size_t cap = g->key_cap ? g->key_cap : 64;
        while (cap < len + 1)
            cap *= 2;
        char *k = realloc(g->key, cap);
        if (!k)
            return SLUICE_ERR_NOMEM;
        g->key = k;
        g->key_cap = cap;
    }
    memcpy(g->key, name, len);
    g->key[len] = '\0';
    pipe_wds_reset(g);
    g->open = true;
    return 0;
}

/* Whether the current sample, which is ending, has everything asked for; sets err when not. */
static int check_complete(struct pipe_wds *g, char *err, size_t errlen)
{
    for (size_t i = 0; i < g->nexts; i++) {
        if (!g->have[i]) {
            int rc = err_set(err, errlen, SLUICE_ERR_INVALID, "sample %s: missing member .%s",
                             g->key, g->exts[i]);
            pipe_wds_reset(g);
            return rc;
        }
    }
    return 0;
}

int pipe_wds_feed(struct pipe_wds *g, const char *name, struct pipe_wds_step *step, char *err,
                  size_t errlen)
{
    step->done = false;
    step->take = -1;
    size_t key_len = 0;
    const char *ext = NULL;
    if (name && !pipe_wds_split(name, &key_len, &ext))
        return 0;
    bool same = name && g->open && strlen(g->key) == key_len && memcmp(g->key, name, key_len) == 0;
    if (!same) {
        /* The current sample ends here. One with none of the asked-for members is no sample. */
        if (g->open && g->nhave > 0) {
            int rc = check_complete(g, err, errlen);
            if (rc < 0)
                return rc;
            step->done = true;
        }
        pipe_wds_reset(g);
        if (!name)
            return 0;
        int rc = start_sample(g, name, key_len);
        if (rc < 0)
            return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    }
    for (size_t i = 0; i < g->nexts; i++) {
        if (strcmp(g->exts[i], ext) != 0)
            continue;
        if (g->have[i]) {
            int rc = err_set(err, errlen, SLUICE_ERR_INVALID, "sample %s: duplicate member .%s",
                             g->key, ext);
            pipe_wds_reset(g);
            return rc;
        }
        g->have[i] = true;
        g->nhave++;
        step->take = (int)i;
        break;
    }
    return 0;
}
