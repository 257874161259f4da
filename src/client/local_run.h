/* sluice_local_*: a pipeline run in the calling process, no service (what `sluice run` does).
 * See include/sluice/sluice.h for the contract. */
#ifndef SLUICE_CLIENT_LOCAL_RUN_H
#define SLUICE_CLIENT_LOCAL_RUN_H

#include "sluice/sluice.h"

#endif
