/*
 * A control message through the wire and back, as the tests of the protocol and of its
 * users (tests/proto, tests/job) check it: encoded as exactly one line, decoded again.
 */
#ifndef DSLAUNCH_TESTS_PROTO_ROUNDTRIP_H
#define DSLAUNCH_TESTS_PROTO_ROUNDTRIP_H

#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/proto/proto.h"
#include "test.h"

/* in, encoded as one line ending in '\n', decoded into out (which the caller releases) */
static inline void msg_roundtrip(const struct dsl_msg *in, struct dsl_msg *out)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 1 << 20);
    ASSERT_OK(dsl_msg_encode(in, &b));
    ASSERT(b.len > 0 && b.buf[b.len - 1] == '\n');
    ASSERT(memchr(b.buf, '\n', b.len - 1) == NULL); /* exactly one line */
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_msg_decode(out, b.buf, b.len - 1, err));
    dsl_dynbuf_release(&b);
}

#endif
