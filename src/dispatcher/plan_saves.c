/* Planning snapshot saves (plan.h; handlers_saves.c calls them; docs/snapshots.md). */

#include "plan_internal.h"

#include "common/names.h"

int plan_save_check(const struct state *s, const char *dataset_id, const char *path, bool endless,
                    uint64_t *existing, char *err, size_t errlen)
{
    *existing = 0;
    int rc = name_check("dataset id", dataset_id, NAME_ID_MAX, err, errlen);
    if (rc < 0)
        return rc;
    if (!path || !path[0])
        return err_set(err, errlen, SLUICE_ERR_INVALID, "snapshot path is empty");
    rc = name_check("snapshot path", path, ST_PATH_MAX - 1, err, errlen);
    if (rc < 0)
        return rc;
    /* An s3:// URL names the same objects everywhere (the shell checks it against the data
     * roots); other URLs are not written. */
    bool s3 = strncmp(path, "s3://", 5) == 0;
    if (!s3 && strstr(path, "://") && path[0] != '/')
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "snapshot path '%s': only s3:// URLs are written (or an absolute path)",
                       path);
    if (path[0] != '/' && !s3)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "snapshot path '%s' is not absolute (dispatcher, workers and readers must "
                       "see it at the same absolute path)",
                       path);
    const struct st_dataset *ds = state_dataset(s, dataset_id);
    if (!ds)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "dataset '%s' not found", dataset_id);
    const struct st_save *sv = state_save_by_path(s, path);
    if (sv && strcmp(sv->dataset_id, dataset_id) != 0)
        return err_set(err, errlen, SLUICE_ERR_EXISTS,
                       "snapshot path '%s' holds a save of dataset '%s', not '%s'", path,
                       sv->dataset_id, dataset_id);
    /* A failed save of the same dataset is started again (a new save): the last one into a path
     * is the one that counts. */
    if (sv && sv->state != ST_SV_FAILED) {
        *existing = sv->id;
        return 0;
    }
    if (endless) {
        if (ds->text && ds->text[0])
            return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                           "cannot save dataset '%s': its pipeline '%s' never ends", dataset_id,
                           ds->text);
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "cannot save dataset '%s': its pipeline never ends", dataset_id);
    }
    return 0;
}

int plan_save_start(const struct state *s, const char *dataset_id, const char *path,
                    const struct split_plan *plan, bool endless, uint64_t *save_out,
                    struct st_update_list *out, char *err, size_t errlen)
{
    uint64_t existing;
    int rc = plan_save_check(s, dataset_id, path, endless, &existing, err, errlen);
    if (rc < 0)
        return rc;
    if (existing) {
        *save_out = existing;
        return 0;
    }
    if (!plan)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "a save needs a split plan");
    if (split_plan_total(plan) == UINT64_MAX)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "cannot save dataset '%s': its splits never end", dataset_id);

    size_t start = out->n;
    uint64_t job_id = s->next_job_id, iteration_id = s->next_iteration_id;
    uint64_t next_task = s->next_task_id;
    uint64_t save_id = s->nsaves ? s->saves[s->nsaves - 1].id + 1 : 1;
    struct st_update *u;
    if (!(u = plan_push(out, ST_JOB_CREATED, job_id)))
        goto nomem;
    memcpy(u->name2, dataset_id, strlen(dataset_id) + 1);
    u->mode = (int)SLUICE_DISTRIBUTED_EPOCH;
    if (!(u = plan_push(out, ST_ITERATION_CREATED, iteration_id)))
        goto nomem;
    u->ref = job_id;
    u->distributed = true;
    if (split_plan_copy(&u->plan, plan) < 0)
        goto nomem;
    if (plan_tasks_for_iteration(s, iteration_id, NULL, NULL, &next_task, out) < 0)
        goto nomem;
    if (!(u = plan_push(out, ST_SAVE_STARTED, save_id)))
        goto nomem;
    u->ref = job_id;
    u->ref2 = iteration_id;
    memcpy(u->name, dataset_id, strlen(dataset_id) + 1);
    if (!(u->text = strdup(path)))
        goto nomem;
    *save_out = save_id;
    return 0;
nomem:
    state_list_truncate(out, start);
    return NOMEM_MSG(err, errlen);
}

static int save_over(const struct state *s, uint64_t save_id, const char *why,
                     struct st_update_list *out, char *err, size_t errlen)
{
    const struct st_save *sv = state_save(s, save_id);
    if (!sv)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "save %" PRIu64 " not found", save_id);
    if (sv->state != ST_SV_RUNNING || plan_pending(out, 0, ST_SAVE_FINISHED, save_id) ||
        plan_pending(out, 0, ST_SAVE_FAILED, save_id))
        return 0;
    size_t start = out->n;
    struct st_update *u = plan_push(out, why ? ST_SAVE_FAILED : ST_SAVE_FINISHED, save_id);
    if (!u)
        return NOMEM_MSG(err, errlen);
    if (why) {
        char msg[PLAN_ERROR_MAX + 1];
        name_escape(why[0] ? why : "save failed", msg, sizeof msg);
        if (!(u->text = strdup(msg))) {
            state_list_truncate(out, start);
            return NOMEM_MSG(err, errlen);
        }
    }
    return 0;
}

int plan_save_finished(const struct state *s, uint64_t save_id, struct st_update_list *out,
                       char *err, size_t errlen)
{
    return save_over(s, save_id, NULL, out, err, errlen);
}

int plan_save_failed(const struct state *s, uint64_t save_id, const char *why,
                     struct st_update_list *out, char *err, size_t errlen)
{
    return save_over(s, save_id, why ? why : "", out, err, errlen);
}
