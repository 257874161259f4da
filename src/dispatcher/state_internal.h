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

const char *state_compression_name(int compression);
void state_list_truncate(struct st_update_list *l, size_t start);
int state_seq_assign(struct st_seq_list *dst, const uint64_t *v, size_t n);
bool state_seq_contains(const struct st_seq_list *l, uint64_t v);
void state_seq_release(struct st_seq_list *l);
int state_seq_reserve(struct st_seq_list *l, size_t extra);

#endif
