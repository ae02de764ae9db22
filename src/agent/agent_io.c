/*
 * The agent's control output: a bounded queue of encoded messages, written only as
 * far as the channel takes it (the fd is non-blocking), through the seal's frames on a
 * connect-back channel. When the queue overflows the launcher has stopped reading; the
 * queue is dropped and the launcher's keepalive gives up on this agent. A write error
 * means the launcher is gone: output stops, and the loop sees EOF on the input.
 */
#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "agent_impl.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/remote/seal.h"
#include "dslaunch/common/banned.h"

void dsl_agent_send(struct dsl_agent *a, const struct dsl_msg *m)
{
    if (a->out_fd < 0)
        return;
    if (dsl_msg_encode(m, &a->outq) < 0) {
        /* queue overflow: the launcher stopped reading; it will time out on us */
        dsl_dynbuf_init(&a->outq, OUTQ_MAX);
    }
}

/* The bytes to write next: the queue itself, or the frames sealed from it. */
static struct dsl_dynbuf *wire(struct dsl_agent *a)
{
    if (!a->seal)
        return &a->outq;
    while (!a->seal->out.len && a->outq.len) {
        size_t k = a->outq.len < DSL_SEAL_FRAME_MAX ? a->outq.len : DSL_SEAL_FRAME_MAX;
        if (dsl_seal_write(a->seal, a->outq.buf, k) < 0) {
            dsl_dynbuf_reset(&a->outq);
            break;
        }
        dsl_dynbuf_consume(&a->outq, k);
    }
    return &a->seal->out;
}

int dsl_agent_want_write(struct dsl_agent *a)
{
    return a->outq.len || (a->seal && a->seal->out.len);
}

void dsl_agent_flush(struct dsl_agent *a, int block)
{
    struct dsl_dynbuf *q;
    while (a->out_fd >= 0 && (q = wire(a))->len) {
        ssize_t w = write(a->out_fd, q->buf, q->len);
        if (w > 0) {
            dsl_dynbuf_consume(q, (size_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN && block) {
            if (dsl_net_wait(a->out_fd, POLLOUT, dsl_now() + 2.0) < 0)
                break;
            continue;
        }
        if (w < 0 && errno != EAGAIN) {
            a->out_fd = -1; /* launcher gone */
            dsl_dynbuf_reset(&a->outq);
        }
        break;
    }
}
