/*
 * The control protocol's members for progress and hangs (proto.h lists them): the
 * progress, stacks and stacked messages and start's optional progress member. proto.c
 * calls these from its encoder, decoder and release; they call nothing back.
 */
#ifndef DSLAUNCH_PROTO_HANG_H
#define DSLAUNCH_PROTO_HANG_H

#include <cjson/cJSON.h>

#include "dslaunch/job/proto.h"

/* Bounds of what a peer may send. */
#define DSL_PROTO_MAX_STACK (256u << 10) /* bytes of one rank's stack text */

/** Add m's progress/stack members (those of its type) to o. */
void dsl_proto_hang_encode(const struct dsl_msg *m, cJSON *o);
/** Decode them from o into m; 0, or DSL_EPROTO with err set. */
int dsl_proto_hang_decode(struct dsl_msg *m, const cJSON *o, char *err);
/** Free what the members own (dsl_msg_release calls it). */
void dsl_proto_hang_release(struct dsl_msg *m);

#endif
