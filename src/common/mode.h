/* The processing modes' names: the one table the CLI, the status document, the dispatcher, the
 * worker and the client use. The enum is the public enum sluice_mode (sluice/sluice.h); the wire
 * (ProcessingMode in proto/wire.proto) and the journal carry the same values. Pure; any thread. */
#ifndef SLUICE_COMMON_MODE_H
#define SLUICE_COMMON_MODE_H

#include "sluice/sluice.h"

#include <stdbool.h>

/* How many modes there are: valid values are 0 .. MODE_COUNT - 1. */
#define MODE_COUNT 6

/* Whether mode is one of the modes (a value from the wire or a file may be anything). */
bool mode_valid(int mode);

/* The mode's name, as status, logs and `--mode` spell it ("parallel_epochs",
 * "distributed_epoch", "file", "data", "file_or_data", "hint"), or "unknown" for a value that is
 * not a mode. Static storage. */
const char *mode_name(enum sluice_mode mode);

/* Whether the mode shards statically (file, data, file_or_data, hint): the dispatcher makes
 * one task per worker of its fixed --worker-addresses list and each worker reads its own shard. */
bool mode_static(enum sluice_mode mode);

/* Parses a mode's name, or one of the old names "off" (parallel_epochs) and "dynamic"
 * (distributed_epoch). Returns 0 with *out set, or SLUICE_ERR_INVALID (*out untouched). */
int mode_parse(const char *text, enum sluice_mode *out);

/* Target workers (enum sluice_target_workers; TargetWorkers on the wire, the same values). */
#define TARGET_WORKERS_COUNT 3
bool target_workers_valid(int t);
/* "any", "local", "auto", or "unknown" for a value that is not one. Static storage. */
const char *target_workers_name(enum sluice_target_workers t);

#endif
