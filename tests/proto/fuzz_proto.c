/* libFuzzer target: arbitrary bytes as a control stream into the line buffer + decoder,
 * and every decoded message re-encoded and decoded again (must round-trip: the second
 * encoding is the first, byte for byte, so every member the tables read they write). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dsl_linebuf lb;
    dsl_linebuf_init(&lb);
    /* feed in two pieces to exercise reassembly */
    size_t half = size / 2;
    char err[DSL_ERR_LEN];
    for (int part = 0; part < 2; part++) {
        const uint8_t *p = part ? data + half : data;
        size_t n = part ? size - half : half;
        if (dsl_linebuf_feed(&lb, p, n) < 0)
            break;
        struct dsl_msg m;
        int r;
        while ((r = dsl_msg_next(&lb, &m, err)) != 0) {
            if (r < 0)
                continue; /* a bad line is consumed; go on with the next */
            struct dsl_dynbuf b;
            dsl_dynbuf_init(&b, DSL_PROTO_MAX_LINE * 2);
            if (dsl_msg_encode(&m, &b) == 0) {
                struct dsl_msg again;
                if (dsl_msg_decode(&again, b.buf, b.len - 1, err) < 0)
                    __builtin_trap(); /* what we encode we must be able to decode */
                if (again.type != m.type)
                    __builtin_trap();
                struct dsl_dynbuf b2;
                dsl_dynbuf_init(&b2, DSL_PROTO_MAX_LINE * 2);
                if (dsl_msg_encode(&again, &b2) < 0 || b2.len != b.len ||
                    memcmp(b2.buf, b.buf, b.len) != 0)
                    __builtin_trap();
                dsl_dynbuf_release(&b2);
                dsl_msg_release(&again);
            }
            dsl_dynbuf_release(&b);
            dsl_msg_release(&m);
        }
    }
    dsl_linebuf_release(&lb);
    return 0;
}
