#include "mode.h"

#include "common/error.h"
#include "wire.pb-c.h"

#include <string.h>

_Static_assert((int)SLUICE__PROCESSING_MODE__MODE_PARALLEL_EPOCHS == SLUICE_PARALLEL_EPOCHS &&
                   (int)SLUICE__PROCESSING_MODE__MODE_DISTRIBUTED_EPOCH ==
                       SLUICE_DISTRIBUTED_EPOCH &&
                   (int)SLUICE__PROCESSING_MODE__MODE_FILE == SLUICE_SHARD_FILE &&
                   (int)SLUICE__PROCESSING_MODE__MODE_DATA == SLUICE_SHARD_DATA &&
                   (int)SLUICE__PROCESSING_MODE__MODE_FILE_OR_DATA == SLUICE_SHARD_FILE_OR_DATA &&
                   (int)SLUICE__PROCESSING_MODE__MODE_HINT == SLUICE_SHARD_HINT,
               "the wire's modes are sluice_mode's values");
_Static_assert(SLUICE_SHARD_HINT == MODE_COUNT - 1, "MODE_COUNT counts every mode");

/* Every mode's name, in enum order, then the old names it still accepts. */
static const struct {
    const char *name;
    enum sluice_mode mode;
} modes[] = {
    {"parallel_epochs", SLUICE_PARALLEL_EPOCHS},
    {"distributed_epoch", SLUICE_DISTRIBUTED_EPOCH},
    {"file", SLUICE_SHARD_FILE},
    {"data", SLUICE_SHARD_DATA},
    {"file_or_data", SLUICE_SHARD_FILE_OR_DATA},
    {"hint", SLUICE_SHARD_HINT},
    {"off", SLUICE_PARALLEL_EPOCHS},
    {"dynamic", SLUICE_DISTRIBUTED_EPOCH},
};

bool mode_valid(int mode)
{
    return mode >= 0 && mode < MODE_COUNT;
}

const char *mode_name(enum sluice_mode mode)
{
    if (mode_valid((int)mode))
        return modes[mode].name;
    return "unknown";
}

bool mode_static(enum sluice_mode mode)
{
    return mode == SLUICE_SHARD_FILE || mode == SLUICE_SHARD_DATA ||
           mode == SLUICE_SHARD_FILE_OR_DATA || mode == SLUICE_SHARD_HINT;
}

int mode_parse(const char *text, enum sluice_mode *out)
{
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        if (strcmp(text, modes[i].name) == 0) {
            *out = modes[i].mode;
            return 0;
        }
    }
    return SLUICE_ERR_INVALID;
}

_Static_assert((int)SLUICE__TARGET_WORKERS__TARGET_WORKERS_ANY == SLUICE_TARGET_WORKERS_ANY &&
                   (int)SLUICE__TARGET_WORKERS__TARGET_WORKERS_LOCAL ==
                       SLUICE_TARGET_WORKERS_LOCAL &&
                   (int)SLUICE__TARGET_WORKERS__TARGET_WORKERS_AUTO == SLUICE_TARGET_WORKERS_AUTO,
               "the wire's target workers are sluice_target_workers' values");

static const char *const target_names[TARGET_WORKERS_COUNT] = {"any", "local", "auto"};

bool target_workers_valid(int t)
{
    return t >= 0 && t < TARGET_WORKERS_COUNT;
}

const char *target_workers_name(enum sluice_target_workers t)
{
    return target_workers_valid((int)t) ? target_names[t] : "unknown";
}

const char *sluice_target_workers_name(enum sluice_target_workers t)
{
    return target_workers_valid((int)t) ? target_names[t] : NULL;
}

int sluice_target_workers_parse(const char *name, enum sluice_target_workers *out)
{
    for (int i = 0; name && i < TARGET_WORKERS_COUNT; i++) {
        if (strcmp(name, target_names[i]) == 0) {
            *out = (enum sluice_target_workers)i;
            return 0;
        }
    }
    return SLUICE_ERR_INVALID;
}
