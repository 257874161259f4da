/* What the state machine's two files share: the small helpers over sequence lists, update lists
 * and id tables that state.c (tables, lookups, state_apply) defines and plan.c (the planning
 * functions) uses. Pure: no I/O, no clocks, no threads. */

#ifndef SLUICE_DISPATCHER_STATE_INTERNAL_H
#define SLUICE_DISPATCHER_STATE_INTERNAL_H

#include "state.h"

#include "common/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* state.c */

/* Compression values as Sluice__Compression numbers them; state.c does not see protobuf. */
const char *state_compression_name(int compression);
/* Drops the updates appended after start: a plan that fails leaves the list as it found it. */
void state_list_truncate(struct st_update_list *l, size_t start);
/* Sorted sequence lists (struct st_seq_list): release; reserve room for extra more (0 or
 * SLUICE_ERR_NOMEM, the list unchanged); contains (binary search); assign a copy of v[0..n)
 * (0, or SLUICE_ERR_NOMEM with dst left empty). */
void state_seq_release(struct st_seq_list *l);
int state_seq_reserve(struct st_seq_list *l, size_t extra);
bool state_seq_contains(const struct st_seq_list *l, uint64_t v);
int state_seq_assign(struct st_seq_list *dst, const uint64_t *v, size_t n);

#endif
