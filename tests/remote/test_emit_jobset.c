/*
 * The Kubernetes JobSet of `--emit jobset` (remote/emit.h): its fixed shape, and every
 * word of a nasty command line and env read back from the manifest byte for byte
 * (yaml_unquote.h, a reader written from the YAML spec), '$' escaped for Kubernetes,
 * the job secret never in it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/remote/emit.h"
#include "test.h"
#include "yaml_unquote.h"

static const char *const nasty[] = {
    "--", "/opt/my train.py", "--lr=$(HOME)", "$$", "a\"b\\c", "line1\nline2\ttab\r",
    "\x1b[31m\x7f", "caf\xc3\xa9 \xf0\x9f\x98\x80", "# not a comment", "- not an item",
    "key: value", "yes", "~", "", " lead", "\xe2\x80\xa8\xef\xbb\xbf", NULL};

static struct dsl_jobset_req req(void)
{
    static const char *const env[] = {"NCCL_DEBUG=INFO", "WEIRD=$(X) \"y\"\n", NULL};
    struct dsl_jobset_req rq = {.name = "my-train-py", .image = "reg.example/t:v1",
                                .nodes = 3, .slots = 4, .gpus = 1, .master_port = 29500,
                                .env = env, .argv = nasty};
    return rq;
}

/* the value of the list item or key on the line that follows `after` (a line's text) */
static char *value_after(const char *yaml, const char *after, int dollars, char **rest)
{
    const char *p = strstr(yaml, after);
    ASSERT(p != NULL);
    p += strlen(after);
    const char *q = strchr(p, '"');
    ASSERT(q != NULL);
    const char *e = strchr(q, '\n');
    ASSERT(e != NULL);
    char *out = malloc((size_t)(e - q) + 1);
    size_t len = 0;
    ASSERT_EQ(yaml_unquote(q, (size_t)(e - q), dollars, out, &len), 0);
    out[len] = '\0';
    if (rest)
        *rest = (char *)e;
    return out;
}

TEST(jobset_should_carry_every_word_byte_for_byte_and_escape_kubernetes_dollars)
{
    struct dsl_jobset_req rq = req();
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 1 << 20);
    char err[DSL_ERR_LEN] = "";
    ASSERT_OK(dsl_emit_jobset(&rq, &b, err));
    const char *y = dsl_dynbuf_str(&b);
    for (size_t i = 0; i < b.len; i++) /* pure printable ASCII, whatever the argv */
        ASSERT(y[i] == '\n' || (y[i] >= 0x20 && y[i] < 0x7f));
    ASSERT_CONTAINS(y, "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\n");
    ASSERT_CONTAINS(y, "        parallelism: 3\n        completions: 3\n"
                       "        completionMode: Indexed\n");
    ASSERT_CONTAINS(y, "              command:\n              - \"dslaunch\"\n"
                       "              - \"--node_rank\"\n"
                       "              - \"$(JOB_COMPLETION_INDEX)\"\n"
                       "              - \"--nnodes\"\n              - \"3\"\n"
                       "              - \"--master_addr\"\n"
                       "              - \"my-train-py-node-0-0.my-train-py\"\n"
                       "              - \"--master_port\"\n              - \"29500\"\n"
                       "              - \"--nproc_per_node\"\n              - \"4\"\n");
    ASSERT_CONTAINS(y, "              - name: \"DSLAUNCH_JOB_SECRET\"\n"
                       "                valueFrom:\n                  secretKeyRef:\n"
                       "                    name: \"my-train-py-secret\"\n"
                       "                    key: \"secret\"\n");
    ASSERT_CONTAINS(y, "nvidia.com/gpu: 4\n");
    ASSERT_CONTAINS(y, "- containerPort: 29500\n              - containerPort: 29501\n");
    ASSERT_CONTAINS(y, "\"--lr=$$(HOME)\""); /* the pod gets $(HOME), not its value */
    /* the user's words, in order, after the nproc_per_node value */
    char *rest = NULL;
    free(value_after(y, "- \"--nproc_per_node\"\n", 1, &rest));
    for (size_t k = 0; nasty[k]; k++) {
        char *w = value_after(rest, "- ", 1, &rest);
        ASSERT_STR_EQ(w, nasty[k]);
        free(w);
    }
    char *v = value_after(y, "name: \"WEIRD\"\n", 1, NULL);
    ASSERT_STR_EQ(v, "$(X) \"y\"\n");
    free(v);
    v = value_after(y, "image: ", 0, NULL);
    ASSERT_STR_EQ(v, "reg.example/t:v1");
    free(v);
    dsl_dynbuf_release(&b);
}

TEST(jobset_without_slots_should_let_each_pod_count_and_ask_for_no_gpu)
{
    struct dsl_jobset_req rq = req();
    rq.slots = 0;
    rq.gpus = 0;
    rq.control_port = 4000;
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 1 << 20);
    char err[DSL_ERR_LEN] = "";
    ASSERT_OK(dsl_emit_jobset(&rq, &b, err));
    const char *y = dsl_dynbuf_str(&b);
    ASSERT(strstr(y, "--nproc_per_node") == NULL);
    ASSERT(strstr(y, "nvidia.com/gpu") == NULL);
    ASSERT_CONTAINS(y, "- containerPort: 4000\n");
    dsl_dynbuf_release(&b);
}

TEST(jobset_should_ask_for_gpus_only_for_a_gpu_job)
{
    const char *note = "unset";
    ASSERT_EQ(dsl_jobset_asks_gpus(2, 0, NULL, &note), 1);
    ASSERT(note == NULL);
    ASSERT_EQ(dsl_jobset_asks_gpus(0, 0, NULL, &note), 0);
    ASSERT(note == NULL);
    ASSERT_EQ(dsl_jobset_asks_gpus(2, 2, NULL, &note), 0);
    ASSERT_CONTAINS(note, "--nproc_per_node counts processes");
    ASSERT_EQ(dsl_jobset_asks_gpus(2, 0, "-1", &note), 0);
    ASSERT_CONTAINS(note, "CUDA_VISIBLE_DEVICES hides every GPU");

    /* the manifest says why in its header and asks for no GPU */
    struct dsl_jobset_req rq = req();
    rq.gpus = 0;
    rq.gpu_note = note;
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 1 << 20);
    char err[DSL_ERR_LEN] = "";
    ASSERT_OK(dsl_emit_jobset(&rq, &b, err));
    const char *y = dsl_dynbuf_str(&b);
    ASSERT_CONTAINS(y, "\n# CUDA_VISIBLE_DEVICES hides every GPU (CPU ranks): no nvidia.com/gpu "
                       "is asked for\n");
    ASSERT_CONTAINS(y, "- \"--nproc_per_node\"\n              - \"4\"\n");
    ASSERT(strstr(y, "nvidia.com/gpu: ") == NULL);
    ASSERT(strstr(y, "resources:") == NULL);
    dsl_dynbuf_release(&b);
}

TEST(jobset_should_refuse_words_that_are_not_utf8_and_bad_env_names_by_name)
{
    struct dsl_jobset_req rq = req();
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 1 << 20);
    char err[DSL_ERR_LEN] = "";
    const char *const bad[] = {"prog", "ok", "x\xffy", NULL};
    rq.argv = bad;
    ASSERT_EQ(dsl_emit_jobset(&rq, &b, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "--emit jobset: the word 'x\\xffy' is not UTF-8 (byte 2)");
    rq = req();
    const char *const env[] = {"A B=1", NULL};
    rq.env = env;
    ASSERT_EQ(dsl_emit_jobset(&rq, &b, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "the exported variable 'A B'");
    rq = req();
    rq.image = NULL;
    ASSERT_EQ(dsl_emit_jobset(&rq, &b, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "--image");
    dsl_dynbuf_release(&b);
}

TEST(yaml_quote_should_escape_everything_outside_printable_ascii)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 1 << 20);
    const char *in = "a\"\\\n\t\r\x7f\xc2\x85\xc3\xa9\xe2\x80\xa8\xf0\x9f\x98\x80$";
    ASSERT_OK(dsl_yaml_quote(&b, in, strlen(in), 0));
    ASSERT_STR_EQ(dsl_dynbuf_str(&b),
                  "\"a\\\"\\\\\\n\\t\\x0d\\x7f\\x85\\xe9\\u2028\\U0001f600$\"");
    dsl_dynbuf_reset(&b);
    ASSERT_OK(dsl_yaml_quote(&b, "$(A)$", 5, 1));
    ASSERT_STR_EQ(dsl_dynbuf_str(&b), "\"$$(A)$$\"");
    dsl_dynbuf_reset(&b);
    dsl_dynbuf_addstr(&b, "keep");
    /* an overlong '/', a surrogate, a byte past U+10FFFF: not UTF-8, output unchanged */
    ASSERT_EQ(dsl_yaml_quote(&b, "ab\xc0\xaf", 4, 0), -3);
    ASSERT_EQ(dsl_yaml_quote(&b, "\xed\xa0\x80", 3, 0), -1);
    ASSERT_EQ(dsl_yaml_quote(&b, "\xf4\x90\x80\x80", 4, 0), -1);
    ASSERT_STR_EQ(dsl_dynbuf_str(&b), "keep");
    dsl_dynbuf_release(&b);
}

TEST(jobset_name_should_be_a_dns_label_from_the_program)
{
    char n[DSL_JOBSET_NAME_MAX + 8];
    dsl_jobset_name("/opt/Train_v2.py", n, sizeof(n));
    ASSERT_STR_EQ(n, "train-v2-py");
    dsl_jobset_name("python3", n, sizeof(n));
    ASSERT_STR_EQ(n, "python3");
    dsl_jobset_name("./2fast", n, sizeof(n));
    ASSERT_STR_EQ(n, "job-2fast");
    dsl_jobset_name("/bin/__", n, sizeof(n));
    ASSERT_STR_EQ(n, "dslaunch");
    dsl_jobset_name("a-very-long-program-name-that-goes-on-and-on-and-on", n, sizeof(n));
    ASSERT(strlen(n) <= DSL_JOBSET_NAME_MAX && n[strlen(n) - 1] != '-');
}

TEST_MAIN()
