/* Planning dataset registration (plan.h; handlers_datasets.c calls it). */

#include "plan_internal.h"

#include "common/names.h"

int plan_register_dataset(const struct state *s, const char *id, const uint8_t *def, size_t def_len,
                          int compression, uint64_t split_size, const char *text, char *id_out,
                          struct st_update_list *out, char *err, size_t errlen)
{
    if (!id)
        id = "";
    int rc = name_check("dataset id", id, NAME_ID_MAX, err, errlen);
    if (rc < 0)
        return rc;
    uint64_t max_bytes = s->limits.max_pipeline_bytes;
    size_t text_len = text ? strlen(text) : 0;
    if (max_bytes && (def_len > max_bytes || text_len > max_bytes))
        return err_set(err, errlen, SLUICE_ERR_LIMIT,
                       "pipeline of %zu bytes is over the limit of %" PRIu64
                       " bytes (--max-pipeline-bytes)",
                       def_len > text_len ? def_len : text_len, max_bytes);
    if (*id) {
        const struct st_dataset *d = state_dataset(s, id);
        if (d) {
            if (d->def_len != def_len || (def_len && memcmp(d->def, def, def_len) != 0)) {
                /* The same text over another definition: what the text does not say differs,
                 * the objects a URL glob listed (pinned to their sizes and ETags) or the
                 * deterministic flag. */
                if (text && d->text && strcmp(d->text, text) == 0)
                    return err_set(err, errlen, SLUICE_ERR_EXISTS,
                                   "dataset '%s' already exists with the same pipeline but "
                                   "another definition: its deterministic setting differs, or "
                                   "the objects its URLs list changed since it was registered "
                                   "(their sizes or ETags); register it under another id",
                                   id);
                return err_set(err, errlen, SLUICE_ERR_EXISTS,
                               "dataset '%s' already exists with a different pipeline", id);
            }
            if (d->compression != compression)
                return err_set(err, errlen, SLUICE_ERR_EXISTS,
                               "dataset '%s' already exists with compression %s, not %s", id,
                               state_compression_name(d->compression),
                               state_compression_name(compression));
            if (d->split_size != split_size)
                return err_set(err, errlen, SLUICE_ERR_EXISTS,
                               "dataset '%s' already exists with split_size %" PRIu64
                               ", not %" PRIu64,
                               id, d->split_size, split_size);
            memcpy(id_out, id, strlen(id) + 1);
            return 0;
        }
    } else {
        for (size_t i = 0; i < s->ndatasets; i++) {
            const struct st_dataset *d = &s->datasets[i];
            if (d->generated && d->def_len == def_len &&
                (def_len == 0 || memcmp(d->def, def, def_len) == 0) &&
                d->compression == compression && d->split_size == split_size) {
                memcpy(id_out, d->id, strlen(d->id) + 1);
                return 0;
            }
        }
    }
    /* Only a new dataset counts: an existing one is still found when the limit is reached. */
    if (s->limits.max_datasets && s->ndatasets >= s->limits.max_datasets)
        return err_set(err, errlen, SLUICE_ERR_LIMIT,
                       "dataset limit reached: %zu datasets (--max-datasets)", s->ndatasets);
    struct st_update *u = plan_push(out, ST_DATASET_REGISTERED, 0);
    if (!u)
        return NOMEM_MSG(err, errlen);
    if (*id) {
        memcpy(u->name, id, strlen(id) + 1);
    } else {
        /* An explicit id may have taken a decimal name already: skip past it. */
        uint64_t n = s->next_dataset_id;
        for (;; n++) {
            snprintf(u->name, sizeof u->name, "%" PRIu64, n);
            if (!state_dataset(s, u->name))
                break;
        }
        u->id = n;
    }
    u->compression = compression;
    u->split_size = split_size;
    u->def_len = def_len;
    u->def = malloc(def_len ? def_len : 1);
    u->text = strdup(text ? text : "");
    if (!u->def || !u->text) {
        state_list_truncate(out, out->n - 1);
        return NOMEM_MSG(err, errlen);
    }
    if (def_len)
        memcpy(u->def, def, def_len);
    memcpy(id_out, u->name, strlen(u->name) + 1);
    return 0;
}
