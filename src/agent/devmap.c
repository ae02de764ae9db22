/* The plan's device ids as places in the step's device list (devmap.h). Pure. */
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "devmap.h"
#include "dslaunch/common/banned.h"

/* item k of the comma list s: its start in *at, its length returned; 0 when absent */
static size_t item(const char *s, long k, const char **at)
{
    for (long i = 0; *s; i++) {
        size_t n = strcspn(s, ",");
        if (i == k) {
            *at = s;
            return n;
        }
        s += n + (s[n] == ',');
    }
    return 0;
}

int dsl_devmap_apply(const char *ids, const char *node, char **out, char *err)
{
    if (!ids[0] || ids[0] == '-') {
        *out = dsl_xstrdup(ids);
        return 0;
    }
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 1 << 20);
    int r = 0;
    for (const char *s = ids; *s;) {
        size_t n = strcspn(s, ",");
        char num[16];
        long k;
        const char *at = NULL;
        size_t len;
        if (n == 0 || n >= sizeof(num) || (s[n] == ',' && !s[n + 1])) {
            r = dsl_seterr(err, DSL_EPLACEMENT, "device list '%.100s' is not a list of numbers",
                           ids);
            break;
        }
        memcpy(num, s, n);
        num[n] = '\0';
        if (dsl_parse_long(num, 0, 1L << 20, &k) < 0) {
            r = dsl_seterr(err, DSL_EPLACEMENT, "device list '%.100s' is not a list of numbers",
                           ids);
            break;
        }
        if ((len = item(node, k, &at)) == 0) {
            r = dsl_seterr(err, DSL_EPLACEMENT, "device %ld is not among the GPUs Slurm gave "
                           "this node's step (CUDA_VISIBLE_DEVICES='%.100s'): the plan has more "
                           "slots on this node than the job has GPUs here", k, node);
            break;
        }
        if (b.len)
            dsl_dynbuf_add(&b, ",", 1);
        dsl_dynbuf_add(&b, at, len);
        s += n + (s[n] == ',');
    }
    if (r == 0)
        *out = dsl_xstrdup(dsl_dynbuf_str(&b));
    dsl_dynbuf_release(&b);
    return r;
}
