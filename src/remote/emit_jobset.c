/*
 * The Kubernetes JobSet of `--emit jobset` (emit.h): one replicated job of N pods, an
 * indexed Job whose pod K runs `dslaunch --node_rank $(JOB_COMPLETION_INDEX) --nnodes N
 * --master_addr <name>-node-0-0.<name> ...` in no-ssh mode (docs/no-ssh.md). Text
 * only: nothing is started or looked up.
 *
 * Quoting. The manifest is YAML in block style whose keys are fixed words of this file
 * and whose every string value is a double-quoted scalar written by dsl_yaml_quote():
 * printable ASCII is copied except '"' and '\', which are escaped, and everything else
 * (control bytes, DEL, any non-ASCII character) becomes \xNN, \uNNNN or \UNNNNNNNN, so
 * the manifest is pure printable ASCII whatever the argv holds and no YAML reader can
 * take a value for a number, a boolean, a comment or a new key. Bytes that are not
 * UTF-8 cannot be a Kubernetes string at all: such a word is refused, named. (Emitting
 * JSON through cJSON was the other choice, JSON being YAML: cJSON writes DEL and
 * non-ASCII bytes raw, which YAML forbids or reads differently, so the few lines here
 * are safer.)
 *
 * Kubernetes itself expands $(VAR) in a container's command and env values and reads
 * $$ as one $: every '$' of a word that comes from the user is doubled, so the pod gets
 * it byte for byte; only the node rank's $(JOB_COMPLETION_INDEX) is left to expand.
 *
 * The job secret is never in the manifest: the pods read DSLAUNCH_JOB_SECRET from the
 * key "secret" of the Secret "<name>-secret", which the header says how to make.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/quote.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/remote/emit.h"
#include "dslaunch/common/banned.h"

/* One UTF-8 character at s[0..n): its length and code point, or 0 when s is no valid,
 * shortest UTF-8 of a scalar value. */
static size_t utf8_next(const unsigned char *s, size_t n, unsigned long *cp)
{
    size_t len;
    unsigned long c, min;
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    } else if ((s[0] & 0xe0) == 0xc0) {
        len = 2, c = s[0] & 0x1f, min = 0x80;
    } else if ((s[0] & 0xf0) == 0xe0) {
        len = 3, c = s[0] & 0x0f, min = 0x800;
    } else if ((s[0] & 0xf8) == 0xf0) {
        len = 4, c = s[0] & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return len;
}

int dsl_yaml_quote(struct dsl_dynbuf *out, const char *s, size_t n, int dollars)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t start = out->len;
    dsl_dynbuf_addstr(out, "\"");
    for (size_t i = 0; i < n;) {
        unsigned long cp;
        size_t len = utf8_next(u + i, n - i, &cp);
        if (!len) {
            out->len = start; /* nothing half-written */
            if (out->buf)
                out->buf[start] = '\0';
            return -(int)(i + 1);
        }
        i += len;
        if (cp == '"' || cp == '\\')
            dsl_dynbuf_addf(out, "\\%c", (char)cp);
        else if (cp == '$' && dollars)
            dsl_dynbuf_addstr(out, "$$");
        else if (cp == '\n')
            dsl_dynbuf_addstr(out, "\\n");
        else if (cp == '\t')
            dsl_dynbuf_addstr(out, "\\t");
        else if (cp >= 0x20 && cp < 0x7f)
            dsl_dynbuf_addf(out, "%c", (char)cp);
        else if (cp < 0x100)
            dsl_dynbuf_addf(out, "\\x%02lx", cp);
        else if (cp < 0x10000)
            dsl_dynbuf_addf(out, "\\u%04lx", cp);
        else
            dsl_dynbuf_addf(out, "\\U%08lx", cp);
    }
    dsl_dynbuf_addstr(out, "\"");
    return 0;
}

/* a user's word as a YAML value; err names it when it is not UTF-8 */
static int add_word(struct dsl_dynbuf *out, const char *what, const char *s, int dollars,
                    char *err)
{
    int r = dsl_yaml_quote(out, s, strlen(s), dollars);
    if (r < 0) {
        char q[200];
        dsl_quote_for_humans(q, sizeof(q), s, strlen(s));
        return dsl_seterr(err, DSL_EUSAGE, "--emit jobset: %s '%s' is not UTF-8 (byte %d): a "
                          "Kubernetes string cannot hold it", what, q, -r);
    }
    return 0;
}

int dsl_jobset_name(const char *program, char *name, size_t cap)
{
    const char *base = strrchr(program, '/');
    base = base ? base + 1 : program;
    size_t n = 0;
    for (; *base && n + 1 < cap && n < DSL_JOBSET_NAME_MAX; base++) {
        char c = *base;
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
            c = '-';
        if (c == '-' && (n == 0 || name[n - 1] == '-'))
            continue;
        name[n++] = c;
    }
    while (n && name[n - 1] == '-')
        n--;
    if (n && name[0] >= '0' && name[0] <= '9' && n + 4 < cap) { /* a label starts with a letter */
        memmove(name + 4, name, n);
        memcpy(name, "job-", 4);
        n += 4;
        if (n > DSL_JOBSET_NAME_MAX)
            n = DSL_JOBSET_NAME_MAX;
        while (n && name[n - 1] == '-')
            n--;
    }
    if (!n)
        n = (size_t)snprintf(name, cap, "dslaunch");
    name[n] = '\0';
    return 0;
}

static int env_name_ok(const char *s, size_t n)
{
    if (!n || (s[0] >= '0' && s[0] <= '9'))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '_' || s[i] == '-' || s[i] == '.' || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
            return 0;
    return 1;
}

int dsl_jobset_asks_gpus(int num_gpus, int nproc_per_node, const char *no_devices,
                         const char **note)
{
    *note = NULL;
    if (nproc_per_node > 0) {
        *note = "--nproc_per_node counts processes: no nvidia.com/gpu is asked for (for a "
                "GPU each, give --num_gpus instead)";
        return 0;
    }
    if (num_gpus > 0 && no_devices) {
        *note = "CUDA_VISIBLE_DEVICES hides every GPU (CPU ranks): no nvidia.com/gpu is "
                "asked for";
        return 0;
    }
    return num_gpus > 0;
}

int dsl_emit_jobset(const struct dsl_jobset_req *rq, struct dsl_dynbuf *out, char *err)
{
    const char *name = rq->name;
    int r;
    if (rq->nodes < 1)
        return dsl_seterr(err, DSL_EUSAGE, "--emit jobset: a job of %d nodes", rq->nodes);
    if (!rq->image || !rq->image[0])
        return dsl_seterr(err, DSL_EUSAGE, "--emit jobset needs --image IMAGE");
    for (size_t k = 0; rq->env && rq->env[k]; k++) {
        const char *eq = strchr(rq->env[k], '=');
        if (!eq || !env_name_ok(rq->env[k], (size_t)(eq - rq->env[k])))
            return dsl_seterr(err, DSL_EUSAGE, "--emit jobset: the exported variable '%.*s' "
                              "has a name Kubernetes does not take", (int)strcspn(rq->env[k], "="),
                              rq->env[k]);
    }
    int control = rq->control_port > 0 ? rq->control_port : rq->master_port + 1;
    dsl_dynbuf_addf(out, "# written by dslaunch --dry-run --emit jobset: %d pod%s (no-ssh "
                    "mode, docs/no-ssh.md)", rq->nodes, rq->nodes == 1 ? "" : "s");
    if (rq->slots > 0)
        dsl_dynbuf_addf(out, " of %d rank%s", rq->slots, rq->slots == 1 ? "" : "s");
    else
        dsl_dynbuf_addstr(out, ", each running as many ranks as its pod has GPUs, else CPUs");
    if (rq->gpu_note && !rq->gpus)
        dsl_dynbuf_addf(out, "\n# %s", rq->gpu_note);
    dsl_dynbuf_addf(out, "\n# The pods read the job secret from the Secret '%s-secret' (key "
                    "'secret'); make it first:\n#   kubectl create secret generic %s-secret "
                    "--from-literal=secret=\"$(openssl rand -hex 32)\"\n# then: kubectl apply "
                    "-f THIS_FILE\n", name, name);
    dsl_dynbuf_addf(out, "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata:\n"
                    "  name: \"%s\"\nspec:\n  network:\n    enableDNSHostnames: true\n"
                    "    subdomain: \"%s\"\n    publishNotReadyAddresses: true\n"
                    "  failurePolicy:\n    maxRestarts: 0\n  replicatedJobs:\n"
                    "  - name: \"node\"\n    replicas: 1\n    template:\n      spec:\n"
                    "        parallelism: %d\n        completions: %d\n"
                    "        completionMode: Indexed\n        backoffLimit: 0\n"
                    "        template:\n          spec:\n            restartPolicy: Never\n"
                    "            containers:\n            - name: \"dslaunch\"\n"
                    "              image: ", name, name, rq->nodes, rq->nodes);
    if ((r = add_word(out, "the image", rq->image, 0, err)) < 0)
        return r;
    /* the command: dslaunch's no-ssh options, the user's options, the program */
    dsl_dynbuf_addf(out, "\n              command:\n              - \"dslaunch\"\n"
                    "              - \"--node_rank\"\n"
                    "              - \"$(JOB_COMPLETION_INDEX)\"\n"
                    "              - \"--nnodes\"\n              - \"%d\"\n"
                    "              - \"--master_addr\"\n              - \"%s-node-0-0.%s\"\n"
                    "              - \"--master_port\"\n              - \"%d\"\n",
                    rq->nodes, name, name, rq->master_port);
    if (rq->slots > 0)
        dsl_dynbuf_addf(out, "              - \"--nproc_per_node\"\n              - \"%d\"\n",
                        rq->slots);
    for (size_t k = 0; rq->argv && rq->argv[k]; k++) {
        dsl_dynbuf_addstr(out, "              - ");
        if ((r = add_word(out, "the word", rq->argv[k], 1, err)) < 0)
            return r;
        dsl_dynbuf_addstr(out, "\n");
    }
    dsl_dynbuf_addf(out, "              env:\n              - name: \"DSLAUNCH_JOB_SECRET\"\n"
                    "                valueFrom:\n                  secretKeyRef:\n"
                    "                    name: \"%s-secret\"\n                    key: \"secret\"\n",
                    name);
    for (size_t k = 0; rq->env && rq->env[k]; k++) {
        const char *eq = strchr(rq->env[k], '=');
        dsl_dynbuf_addf(out, "              - name: \"%.*s\"\n                value: ",
                        (int)(eq - rq->env[k]), rq->env[k]);
        if ((r = add_word(out, "the exported value", eq + 1, 1, err)) < 0)
            return r;
        dsl_dynbuf_addstr(out, "\n");
    }
    dsl_dynbuf_addf(out, "              ports:\n              - containerPort: %d\n"
                    "              - containerPort: %d\n", rq->master_port, control);
    if (rq->slots > 0 && rq->gpus)
        dsl_dynbuf_addf(out, "              resources:\n                limits:\n"
                        "                  nvidia.com/gpu: %d\n", rq->slots);
    return 0;
}
