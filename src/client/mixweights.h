/* Changing a mix's weights while its job runs (sluice_set_weights in sluice.h): the local check
 * of a request and the SetMixWeights call to the dispatcher, whose answer names the position the
 * change takes effect at and the mix's dataset. The dispatcher journals the change and checks
 * what only it knows: that the job reads a mix, the weight count against the mix's inputs, and
 * that no reader may already have passed the position asked for. */
#ifndef SLUICE_CLIENT_MIXWEIGHTS_H
#define SLUICE_CLIENT_MIXWEIGHTS_H

#include "common/names.h"

#include <stddef.h>
#include <stdint.h>

struct sluice_client;

/* What the dispatcher answered. */
struct mixweights_reply {
    uint64_t from;                    /* the output position the new weights apply from */
    char dataset_id[NAME_ID_MAX + 1]; /* the mix's dataset (cut to fit, if ever longer) */
};

/* Checks a request without asking anyone: job_name non-empty and a valid name; dataset_id NULL,
 * empty or a valid name; 1 to 64 weights (PIPE_MIX_MAX_INPUTS), each finite and >= 0, not all
 * 0. Returns 0 or SLUICE_ERR_INVALID with the first problem in err, a weight named by its
 * 0-based index ("weight 2 is -1, expected a number >= 0"). Pure; any thread. */
int mixweights_check(const char *job_name, const char *dataset_id, const double *weights, size_t n,
                     char *err, size_t errlen);

/* mixweights_check, then asks the dispatcher to apply weights to the mix read as job_name from
 * position at (0: the first position no reader may have passed), filling *out (out may be NULL).
 * Returns 0, or a negative code with a message in err: the check's, or the dispatcher's refusal
 * (sluice.h lists them). Blocks; not on the client's loop thread. */
int mixweights_set(struct sluice_client *client, const char *job_name, const char *dataset_id,
                   const double *weights, size_t n, uint64_t at, struct mixweights_reply *out,
                   char *err, size_t errlen);

#endif
