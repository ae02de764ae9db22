/*
 * Unit tests for placement: --include/--exclude/--num_nodes/--num_gpus against a fixed
 * hostfile (DeepSpeed's documented results plus dslaunch's stricter errors), rank
 * numbering and renumbering without dropped nodes, the world-info JSON and base64
 * encodings (checked against strings made by Python's json.dumps and
 * base64.urlsafe_b64encode), CUDA_VISIBLE_DEVICES and the local slot count.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/plan/hostfile.h"
#include "dslaunch/plan/placement.h"
#include "test.h"

static const char hosts3[] = "worker-0 slots=4\nworker-1 slots=4\nworker-2 slots=2\n";

static void load3(struct dsl_hostfile *hf)
{
    char err[DSL_ERR_LEN];
    dsl_hostfile_init(hf);
    ASSERT_OK(dsl_hostfile_parse(hf, "h3.txt", hosts3, strlen(hosts3), err));
}

#define NONE (-1)

static const struct {
    const char *include, *exclude;
    int num_nodes, num_gpus;
    const char *want; /* world-info JSON */
} good[] = {
    {NULL, NULL, NONE, NONE,
     "{\"worker-0\": [0, 1, 2, 3], \"worker-1\": [0, 1, 2, 3], \"worker-2\": [0, 1]}"},
    /* DeepSpeed's documented examples */
    {"worker-0:0,2@worker-1", NULL, NONE, NONE, "{\"worker-0\": [0, 2], \"worker-1\": [0, 1, 2, 3]}"},
    {"worker-0@worker-1:0,2", NULL, NONE, NONE, "{\"worker-0\": [0, 1, 2, 3], \"worker-1\": [0, 2]}"},
    {NULL, "worker-1:0", NONE, NONE,
     "{\"worker-0\": [0, 1, 2, 3], \"worker-1\": [1, 2, 3], \"worker-2\": [0, 1]}"},
    /* include slot lists are sorted and deduplicated */
    {"worker-0:2,0,2", NULL, NONE, NONE, "{\"worker-0\": [0, 2]}"},
    {"worker-0:3,1,0", NULL, NONE, NONE, "{\"worker-0\": [0, 1, 3]}"},
    /* the result follows hostfile order, not the filter's */
    {"worker-2@worker-1:1", NULL, NONE, NONE, "{\"worker-1\": [1], \"worker-2\": [0, 1]}"},
    {"worker-2@worker-0", NULL, NONE, NONE, "{\"worker-0\": [0, 1, 2, 3], \"worker-2\": [0, 1]}"},
    /* a host named twice: the union (DeepSpeed keeps only the last) */
    {"worker-0:0@worker-0:3", NULL, NONE, NONE, "{\"worker-0\": [0, 3]}"},
    {"worker-0:1@worker-0", NULL, NONE, NONE, "{\"worker-0\": [0, 1, 2, 3]}"},
    {"worker-1:3", NULL, NONE, NONE, "{\"worker-1\": [3]}"},
    /* exclude: whole hosts dropped, empty hosts dropped */
    {NULL, "worker-1", NONE, NONE, "{\"worker-0\": [0, 1, 2, 3], \"worker-2\": [0, 1]}"},
    {NULL, "worker-0:0@worker-2:0", NONE, NONE,
     "{\"worker-0\": [1, 2, 3], \"worker-1\": [0, 1, 2, 3], \"worker-2\": [1]}"},
    {NULL, "worker-2:0,1", NONE, NONE, "{\"worker-0\": [0, 1, 2, 3], \"worker-1\": [0, 1, 2, 3]}"},
    {NULL, "worker-2", NONE, NONE, "{\"worker-0\": [0, 1, 2, 3], \"worker-1\": [0, 1, 2, 3]}"},
    {NULL, "worker-0:1,1@worker-0:1", NONE, NONE,
     "{\"worker-0\": [0, 2, 3], \"worker-1\": [0, 1, 2, 3], \"worker-2\": [0, 1]}"},
    {NULL, "worker-0@worker-1@worker-2:1", NONE, NONE, "{\"worker-2\": [0]}"},
    /* host ranges in filters */
    {"worker-[0-1]:1", NULL, NONE, NONE, "{\"worker-0\": [1], \"worker-1\": [1]}"},
    {NULL, "worker-[1-2]", NONE, NONE, "{\"worker-0\": [0, 1, 2, 3]}"},
    /* num_nodes / num_gpus */
    {NULL, NULL, 2, NONE, "{\"worker-0\": [0, 1, 2, 3], \"worker-1\": [0, 1, 2, 3]}"},
    {NULL, NULL, 3, NONE,
     "{\"worker-0\": [0, 1, 2, 3], \"worker-1\": [0, 1, 2, 3], \"worker-2\": [0, 1]}"},
    {NULL, NULL, 1, 1, "{\"worker-0\": [0]}"},
    {NULL, NULL, 2, 3, "{\"worker-0\": [0, 1, 2], \"worker-1\": [0, 1, 2]}"},
    {NULL, NULL, NONE, 2, "{\"worker-0\": [0, 1], \"worker-1\": [0, 1], \"worker-2\": [0, 1]}"},
};

TEST(placement_should_follow_deepspeed_semantics)
{
    struct dsl_hostfile hf;
    load3(&hf);
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        struct dsl_placement pl;
        struct dsl_placement_opts o = {good[i].include, good[i].exclude, good[i].num_nodes,
                                       good[i].num_gpus, NULL};
        char err[DSL_ERR_LEN] = "";
        int r = dsl_placement_build(&pl, &hf, &o, err);
        if (r < 0)
            fprintf(stderr, "case %zu: %s\n", i, err);
        ASSERT_OK(r);
        char *json = dsl_placement_world_info_json(&pl);
        if (strcmp(json, good[i].want) != 0)
            fprintf(stderr, "case %zu\n", i);
        ASSERT_STR_EQ(json, good[i].want);
        free(json);
        /* numbering: node_rank by position, ranks contiguous in node order */
        int rank = 0;
        for (int n = 0; n < pl.nr; n++) {
            ASSERT_EQ(pl.nodes[n].node_rank, n);
            ASSERT_EQ(pl.nodes[n].first_rank, rank);
            ASSERT(pl.nodes[n].nslots > 0);
            for (int s = 1; s < pl.nodes[n].nslots; s++)
                ASSERT(pl.nodes[n].slots[s - 1] < pl.nodes[n].slots[s]);
            rank += pl.nodes[n].nslots;
        }
        ASSERT_EQ(pl.world_size, rank);
        dsl_placement_release(&pl);
        ASSERT_EQ(pl.nr, 0);
        ASSERT(pl.nodes == NULL);
    }
    dsl_hostfile_release(&hf);
}

static const struct {
    const char *include, *exclude;
    int num_nodes, num_gpus;
    const char *msg; /* the whole message */
} bad_filters[] = {
    {"worker-0:", NULL, NONE, NONE, "--include 'worker-0:': empty slot list in 'worker-0:'"},
    {"worker-0:1:2", NULL, NONE, NONE,
     "--include 'worker-0:1:2': bad node spec 'worker-0:1:2' (expected HOST[:SLOT[,SLOT...]])"},
    {"worker-0@", NULL, NONE, NONE,
     "--include 'worker-0@': empty node spec (expected HOST[:SLOT[,SLOT...]] joined by '@')"},
    {"@", NULL, NONE, NONE,
     "--include '@': empty node spec (expected HOST[:SLOT[,SLOT...]] joined by '@')"},
    {"@worker-0", NULL, NONE, NONE,
     "--include '@worker-0': empty node spec (expected HOST[:SLOT[,SLOT...]] joined by '@')"},
    {"worker-0@@worker-1", NULL, NONE, NONE,
     "--include 'worker-0@@worker-1': empty node spec (expected HOST[:SLOT[,SLOT...]] joined by '@')"},
    {"worker-0:x", NULL, NONE, NONE, "--include 'worker-0:x': bad slot 'x' for host 'worker-0'"},
    {"worker-0:1,", NULL, NONE, NONE, "--include 'worker-0:1,': bad slot '' for host 'worker-0'"},
    {"worker-0:1,,2", NULL, NONE, NONE, "--include 'worker-0:1,,2': bad slot '' for host 'worker-0'"},
    {"worker-0:-1", NULL, NONE, NONE, "--include 'worker-0:-1': bad slot '-1' for host 'worker-0'"},
    {"worker-0:1-2", NULL, NONE, NONE, "--include 'worker-0:1-2': bad slot '1-2' for host 'worker-0'"},
    {":0", NULL, NONE, NONE, "--include ':0': missing host name in ':0'"},
    {"worker-9", NULL, NONE, NONE,
     "--include 'worker-9': unknown host 'worker-9' (known hosts: worker-0, worker-1, worker-2)"},
    {"worker-0,worker-1", NULL, NONE, NONE,
     "--include 'worker-0,worker-1': unknown host 'worker-0,worker-1' (known hosts: worker-0, "
     "worker-1, worker-2); hosts are joined with '@', e.g. 'worker-0@worker-1' (',' separates "
     "slots: 'worker-0:0,1')"},
    {"worker-0,worker-9", NULL, NONE, NONE,
     "--include 'worker-0,worker-9': unknown host 'worker-0,worker-9' (known hosts: worker-0, "
     "worker-1, worker-2)"},
    {"worker-0:7", NULL, NONE, NONE,
     "--include 'worker-0:7': host 'worker-0' has no slot 7 (it has slots 0-3)"},
    {"worker-2:2", NULL, NONE, NONE,
     "--include 'worker-2:2': host 'worker-2' has no slot 2 (it has slots 0-1)"},
    {"worker-[0-3]", NULL, NONE, NONE,
     "--include 'worker-[0-3]': unknown host 'worker-3' (known hosts: worker-0, worker-1, worker-2)"},
    {"worker-[3-0]", NULL, NONE, NONE,
     "--include 'worker-[3-0]': bad host range 'worker-[3-0]': reversed range '3-0'"},
    {NULL, "worker-9", NONE, NONE,
     "--exclude 'worker-9': unknown host 'worker-9' (known hosts: worker-0, worker-1, worker-2)"},
    {NULL, "worker-1:4", NONE, NONE,
     "--exclude 'worker-1:4': host 'worker-1' has no slot 4 (it has slots 0-3)"},
    {NULL, "worker-0@worker-1@worker-2", NONE, NONE,
     "--exclude 'worker-0@worker-1@worker-2' leaves no slots to run on"},
    {NULL, "worker-[0-2]", NONE, NONE, "--exclude 'worker-[0-2]' leaves no slots to run on"},
    {"worker-0", "worker-1", NONE, NONE, "--include and --exclude cannot be used together"},
    {"worker-0", NULL, 1, NONE, "--num_nodes cannot be combined with --include"},
    {NULL, "worker-0", NONE, 1, "--num_gpus cannot be combined with --exclude"},
    {NULL, NULL, 4, NONE, "--num_nodes 4 but there are only 3 hosts"},
    {NULL, NULL, NONE, 3, "--num_gpus 3 but host 'worker-2' has only 2 slots (a filter selects among a host's "
                            "slots and cannot add any: docs/placement.md)"},
    {NULL, NULL, NONE, 5, "--num_gpus 5 but host 'worker-0' has only 4 slots (a filter selects among a host's "
                            "slots and cannot add any: docs/placement.md)"},
    {NULL, NULL, 0, NONE, "--num_nodes must be at least 1, not 0"},
    {NULL, NULL, NONE, 0, "--num_gpus must be at least 1, not 0"},
    {NULL, NULL, -2, NONE, "--num_nodes must be at least 1, not -2"},
    /* an empty filter (an unset variable in a script) is not "every host" */
    {"", NULL, NONE, NONE, "--include '' is empty (name hosts and slots, e.g. "
                           "'worker-0:0,1@worker-1')"},
    {NULL, "", NONE, NONE, "--exclude '' is empty (name hosts and slots, e.g. "
                           "'worker-0:0,1@worker-1')"},
    {"worker-\x1b[2J", NULL, NONE, NONE,
     "--include 'worker-\\x1b[2J': bad host range 'worker-\\x1b[2J': unclosed '['"},
};

TEST(placement_should_reject_bad_filters_with_clear_messages)
{
    struct dsl_hostfile hf;
    load3(&hf);
    for (size_t i = 0; i < sizeof(bad_filters) / sizeof(bad_filters[0]); i++) {
        struct dsl_placement pl;
        struct dsl_placement_opts o = {bad_filters[i].include, bad_filters[i].exclude,
                                       bad_filters[i].num_nodes, bad_filters[i].num_gpus, NULL};
        char err[DSL_ERR_LEN] = "";
        int r = dsl_placement_build(&pl, &hf, &o, err);
        if (r >= 0)
            fprintf(stderr, "case %zu should fail\n", i);
        ASSERT_EQ(r, DSL_EPLACEMENT);
        ASSERT_STR_EQ(err, bad_filters[i].msg);
        ASSERT_EQ(pl.nr, 0);
        ASSERT(pl.nodes == NULL);
        ASSERT_EQ(pl.world_size, 0);
    }
    dsl_hostfile_release(&hf);
}

/* DNS ignores ASCII case and so does the hostfile's duplicate check ('W' after 'w' is a
 * duplicate): a filter names a host the same way, and the hostfile's spelling is the
 * one every result and message uses */
TEST(placement_should_match_filter_hosts_ignoring_case_and_keep_the_hostfile_spelling)
{
    static const char text[] = "worker-0 slots=4\nNode-B slots=2\n";
    static const struct {
        const char *include, *exclude, *want;
    } cases[] = {
        {"Worker-0", NULL, "{\"worker-0\": [0, 1, 2, 3]}"},
        {"WORKER-0:2,0@node-b:1", NULL, "{\"worker-0\": [0, 2], \"Node-B\": [1]}"},
        {"WORKER-[0-1]", NULL, NULL}, /* worker-1 is unknown: checked below */
        {"node-b", NULL, "{\"Node-B\": [0, 1]}"},
        {"WORKER-[0-0]:1", NULL, "{\"worker-0\": [1]}"},
        /* names differing only in case are the same host named twice: the union */
        {"worker-0:0@Worker-0:3@WORKER-0:3", NULL, "{\"worker-0\": [0, 3]}"},
        {"Worker-0:1@worker-0", NULL, "{\"worker-0\": [0, 1, 2, 3]}"},
        {NULL, "Worker-0:1,1@worker-0:1@NODE-b", "{\"worker-0\": [0, 2, 3]}"},
        {NULL, "node-B:0@Node-b:1", "{\"worker-0\": [0, 1, 2, 3]}"},
    };
    struct dsl_hostfile hf;
    char err[DSL_ERR_LEN];
    dsl_hostfile_init(&hf);
    ASSERT_OK(dsl_hostfile_parse(&hf, "h", text, strlen(text), err));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct dsl_placement pl;
        struct dsl_placement_opts o = {cases[i].include, cases[i].exclude, NONE, NONE, NULL};
        int r = dsl_placement_build(&pl, &hf, &o, err);
        if (!cases[i].want) {
            ASSERT_EQ(r, DSL_EPLACEMENT);
            ASSERT_STR_EQ(err, "--include 'WORKER-[0-1]': unknown host 'WORKER-1' (known hosts: "
                               "worker-0, Node-B)");
            continue;
        }
        if (r < 0)
            fprintf(stderr, "case %zu: %s\n", i, err);
        ASSERT_OK(r);
        char *json = dsl_placement_world_info_json(&pl);
        ASSERT_STR_EQ(json, cases[i].want);
        free(json);
        /* the node's name (MASTER_ADDR, the agent's host) is the hostfile's */
        ASSERT_STR_EQ(pl.nodes[0].host, cases[i].want[2] == 'w' ? "worker-0" : "Node-B");
        dsl_placement_release(&pl);
    }
    /* messages name the host as the hostfile spells it */
    struct dsl_placement pl;
    struct dsl_placement_opts o = {"WORKER-0:7", NULL, NONE, NONE, NULL};
    ASSERT_EQ(dsl_placement_build(&pl, &hf, &o, err), DSL_EPLACEMENT);
    ASSERT_STR_EQ(err, "--include 'WORKER-0:7': host 'worker-0' has no slot 7 (it has slots 0-3)");
    struct dsl_placement_opts c = {"Worker-0,node-b", NULL, NONE, NONE, NULL};
    ASSERT_EQ(dsl_placement_build(&pl, &hf, &c, err), DSL_EPLACEMENT);
    ASSERT_STR_EQ(err, "--include 'Worker-0,node-b': unknown host 'Worker-0,node-b' (known "
                       "hosts: worker-0, Node-B); hosts are joined with '@', e.g. "
                       "'worker-0@worker-1' (',' separates slots: 'worker-0:0,1')");
    /* the lookup itself: any case finds the line, the line keeps its spelling */
    ASSERT_STR_EQ(dsl_hostfile_find(&hf, "NODE-B")->name, "Node-B");
    ASSERT(dsl_hostfile_find(&hf, "node-c") == NULL);
    ASSERT(dsl_hostfile_find(&hf, "node-") == NULL);
    ASSERT(dsl_hostfile_find(&hf, "node-bb") == NULL);
    dsl_hostfile_release(&hf);
}

TEST(placement_should_filter_user_at_host_lines_by_the_host_alone)
{
    const char *text = "alice@n1 slots=2\nn2 slots=1\nbob@n[3-4] slots=1\n";
    struct dsl_hostfile hf;
    struct dsl_placement pl;
    char err[DSL_ERR_LEN];
    dsl_hostfile_init(&hf);
    ASSERT_OK(dsl_hostfile_parse(&hf, "h", text, strlen(text), err));
    /* the filters name bare hosts; the users ride along to the nodes */
    struct dsl_placement_opts o = {"n1:1@n4", NULL, NONE, NONE, NULL};
    ASSERT_OK(dsl_placement_build(&pl, &hf, &o, err));
    ASSERT_EQ(pl.nr, 2);
    ASSERT_STR_EQ(pl.nodes[0].host, "n1");
    ASSERT_STR_EQ(pl.nodes[0].user, "alice");
    ASSERT_STR_EQ(pl.nodes[1].host, "n4");
    ASSERT_STR_EQ(pl.nodes[1].user, "bob");
    char *json = dsl_placement_world_info_json(&pl);
    ASSERT_STR_EQ(json, "{\"n1\": [1], \"n4\": [0]}");
    free(json);
    dsl_placement_release(&pl);
    o = (struct dsl_placement_opts){NULL, "n1@n3", NONE, NONE, NULL};
    ASSERT_OK(dsl_placement_build(&pl, &hf, &o, err));
    ASSERT_EQ(pl.nr, 2);
    ASSERT(pl.nodes[0].user == NULL);
    ASSERT_STR_EQ(pl.nodes[1].user, "bob");
    /* a restart keeps each node's user */
    unsigned char drop[2] = {1, 0};
    ASSERT_EQ(dsl_placement_drop(&pl, drop), 1);
    ASSERT_STR_EQ(pl.nodes[0].host, "n4");
    ASSERT_STR_EQ(pl.nodes[0].user, "bob");
    dsl_placement_release(&pl);
    /* "alice@n1" in a filter is two hosts, and alice is none: say what '@' means there */
    o = (struct dsl_placement_opts){"alice@n1", NULL, NONE, NONE, NULL};
    ASSERT_EQ(dsl_placement_build(&pl, &hf, &o, err), DSL_EPLACEMENT);
    ASSERT_CONTAINS(err, "--include 'alice@n1': unknown host 'alice' (known hosts: n1, n2, n3, n4)");
    ASSERT_CONTAINS(err, "that is a login user of the hostfile: filters name hosts alone");
    dsl_hostfile_release(&hf);
}

TEST(placement_should_cap_the_known_hosts_list_and_name_a_single_slot)
{
    const char *text = "a slots=1\nb slots=1\nc slots=1\nd slots=1\ne slots=1\nf slots=1\n";
    struct dsl_hostfile hf;
    struct dsl_placement pl;
    char err[DSL_ERR_LEN];
    dsl_hostfile_init(&hf);
    ASSERT_OK(dsl_hostfile_parse(&hf, "h", text, strlen(text), err));
    struct dsl_placement_opts o = {"z", NULL, NONE, NONE, NULL};
    ASSERT_EQ(dsl_placement_build(&pl, &hf, &o, err), DSL_EPLACEMENT);
    ASSERT_STR_EQ(err, "--include 'z': unknown host 'z' (known hosts: a, b, c, d, ...)");
    o.include = "a:1";
    ASSERT_EQ(dsl_placement_build(&pl, &hf, &o, err), DSL_EPLACEMENT);
    ASSERT_STR_EQ(err, "--include 'a:1': host 'a' has no slot 1 (it has slot 0)");
    dsl_hostfile_release(&hf);

    dsl_hostfile_init(&hf);
    dsl_hostfile_add(&hf, "localhost", 1);
    o = (struct dsl_placement_opts){NULL, NULL, 2, NONE, NULL};
    ASSERT_EQ(dsl_placement_build(&pl, &hf, &o, err), DSL_EPLACEMENT);
    ASSERT_STR_EQ(err, "--num_nodes 2 but there is only 1 host");
    dsl_hostfile_release(&hf);
    ASSERT_EQ(dsl_placement_build(&pl, &hf, &o, err), DSL_EPLACEMENT);
    ASSERT_STR_EQ(err, "no hosts to place ranks on");
}

TEST(placement_should_number_ranks_across_nodes)
{
    struct dsl_hostfile hf;
    struct dsl_placement pl;
    char err[DSL_ERR_LEN];
    load3(&hf);
    struct dsl_placement_opts o = {NULL, "worker-0:0,1@worker-1", NONE, NONE, NULL};
    ASSERT_OK(dsl_placement_build(&pl, &hf, &o, err));
    ASSERT_EQ(pl.nr, 2);
    ASSERT_EQ(pl.world_size, 4);
    ASSERT_STR_EQ(pl.nodes[0].host, "worker-0");
    ASSERT_EQ(pl.nodes[0].node_rank, 0);
    ASSERT_EQ(pl.nodes[0].first_rank, 0);
    ASSERT_EQ(pl.nodes[0].nslots, 2);
    ASSERT_EQ(pl.nodes[0].slots[0], 2);
    ASSERT_EQ(pl.nodes[0].slots[1], 3);
    ASSERT_STR_EQ(pl.nodes[1].host, "worker-2");
    ASSERT_EQ(pl.nodes[1].node_rank, 1);
    ASSERT_EQ(pl.nodes[1].first_rank, 2);
    ASSERT_EQ(pl.nodes[1].nslots, 2);
    dsl_placement_release(&pl);
    dsl_hostfile_release(&hf);
}

TEST(placement_drop_should_keep_the_order_and_number_again)
{
    struct dsl_hostfile hf;
    struct dsl_placement pl;
    char err[DSL_ERR_LEN];
    load3(&hf);
    struct dsl_placement_opts o = {NULL, NULL, NONE, 2, NULL};
    ASSERT_OK(dsl_placement_build(&pl, &hf, &o, err));
    ASSERT_EQ(pl.world_size, 6);
    /* the middle node out: the third moves up, its ranks follow the first node's */
    unsigned char drop[3] = {0, 1, 0};
    ASSERT_EQ(dsl_placement_drop(&pl, drop), 2);
    ASSERT_EQ(pl.nr, 2);
    ASSERT_EQ(pl.world_size, 4);
    ASSERT_STR_EQ(pl.nodes[0].host, "worker-0");
    ASSERT_EQ(pl.nodes[0].first_rank, 0);
    ASSERT_STR_EQ(pl.nodes[1].host, "worker-2");
    ASSERT_EQ(pl.nodes[1].node_rank, 1);
    ASSERT_EQ(pl.nodes[1].first_rank, 2);
    ASSERT_EQ(pl.nodes[1].nslots, 2);
    ASSERT_EQ(pl.nodes[1].slots[1], 1);
    /* NULL drops nothing; then node 0 out: the old third node becomes node 0 */
    ASSERT_EQ(dsl_placement_drop(&pl, NULL), 2);
    unsigned char first[2] = {1, 0};
    ASSERT_EQ(dsl_placement_drop(&pl, first), 1);
    ASSERT_STR_EQ(pl.nodes[0].host, "worker-2");
    ASSERT_EQ(pl.nodes[0].node_rank, 0);
    ASSERT_EQ(pl.nodes[0].first_rank, 0);
    ASSERT_EQ(pl.world_size, 2);
    dsl_placement_release(&pl);
    dsl_hostfile_release(&hf);
}

TEST(world_info_should_match_python_json_and_urlsafe_base64)
{
    static const struct {
        const char *hosts, *include, *json, *b64;
    } cases[] = {
        {"worker-0 slots=2\nworker-1 slots=1\n", NULL, "{\"worker-0\": [0, 1], \"worker-1\": [0]}",
         "eyJ3b3JrZXItMCI6IFswLCAxXSwgIndvcmtlci0xIjogWzBdfQ=="},
        {"localhost slots=1\n", NULL, "{\"localhost\": [0]}", "eyJsb2NhbGhvc3QiOiBbMF19"},
        {"a slots=4\nb.example.com slots=4\n", "a@b.example.com:3,1",
         "{\"a\": [0, 1, 2, 3], \"b.example.com\": [1, 3]}",
         "eyJhIjogWzAsIDEsIDIsIDNdLCAiYi5leGFtcGxlLmNvbSI6IFsxLCAzXX0="},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct dsl_hostfile hf;
        struct dsl_placement pl;
        char err[DSL_ERR_LEN];
        dsl_hostfile_init(&hf);
        ASSERT_OK(dsl_hostfile_parse(&hf, "h", cases[i].hosts, strlen(cases[i].hosts), err));
        struct dsl_placement_opts o = {cases[i].include, NULL, NONE, NONE, NULL};
        ASSERT_OK(dsl_placement_build(&pl, &hf, &o, err));
        char *json = dsl_placement_world_info_json(&pl), *b64 = dsl_placement_world_info_b64(&pl);
        ASSERT_STR_EQ(json, cases[i].json);
        ASSERT_STR_EQ(b64, cases[i].b64);
        free(json);
        free(b64);
        dsl_placement_release(&pl);
        dsl_hostfile_release(&hf);
    }
    /* an empty placement is "{}" */
    struct dsl_placement empty;
    dsl_placement_init(&empty);
    char *json = dsl_placement_world_info_json(&empty), *b64 = dsl_placement_world_info_b64(&empty);
    ASSERT_STR_EQ(json, "{}");
    ASSERT_STR_EQ(b64, "e30=");
    free(json);
    free(b64);
}

TEST(world_info_should_escape_names_as_python_does)
{
    /* names a hostfile refuses can still arrive through dsl_hostfile_add() */
    struct dsl_hostfile hf;
    struct dsl_placement pl;
    char err[DSL_ERR_LEN];
    dsl_hostfile_init(&hf);
    dsl_hostfile_add(&hf, "a\"b\\\n\x7f\x01\xc3\xa9\xf0\x9f\x98\x80", 1);
    struct dsl_placement_opts o = {NULL, NULL, NONE, NONE, NULL};
    ASSERT_OK(dsl_placement_build(&pl, &hf, &o, err));
    char *json = dsl_placement_world_info_json(&pl);
    /* python3 -c 'import json; print(json.dumps({"a\"b\\\n\x7f\x01é😀": [0]}))' */
    ASSERT_STR_EQ(json, "{\"a\\\"b\\\\\\n\\u007f\\u0001\\u00e9\\ud83d\\ude00\": [0]}");
    free(json);
    dsl_placement_release(&pl);
    dsl_hostfile_release(&hf);
}

TEST(base64url_should_pad_and_use_the_urlsafe_alphabet)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"", ""},           {"f", "Zg=="},         {"fo", "Zm8="},
        {"foo", "Zm9v"},    {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
        {"foobar", "Zm9vYmFy"}, {"\xfb\xff\xfe", "-__-"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *s = dsl_base64url(cases[i].in, strlen(cases[i].in));
        ASSERT_STR_EQ(s, cases[i].out);
        free(s);
    }
}

TEST(cuda_visible_devices_should_become_an_include_only_when_nothing_else_selects)
{
    struct dsl_placement_opts none = {NULL, NULL, NONE, NONE, NULL};
    char *inc = (char *)"untouched";
    char err[DSL_ERR_LEN];
    ASSERT_EQ(dsl_placement_cuda_visible(NULL, &none, &inc, err), 0);
    ASSERT(inc == NULL);
    ASSERT_EQ(dsl_placement_cuda_visible("", &none, &inc, err), 0);
    ASSERT(inc == NULL);
    ASSERT_EQ(dsl_placement_cuda_visible("1,2", &none, &inc, err), 1);
    ASSERT_STR_EQ(inc, "localhost:1,2");
    free(inc);
    ASSERT_EQ(dsl_placement_cuda_visible("3", &none, &inc, err), 1);
    ASSERT_STR_EQ(inc, "localhost:3");
    free(inc);

    static const struct dsl_placement_opts given[] = {
        {"localhost:0", NULL, NONE, NONE, NULL},
        {NULL, "localhost:0", NONE, NONE, NULL},
        {NULL, NULL, 1, NONE, NULL},
        {NULL, NULL, NONE, 2, NULL},
    };
    for (size_t i = 0; i < sizeof(given) / sizeof(given[0]); i++) {
        ASSERT_EQ(dsl_placement_cuda_visible("1,2", &given[i], &inc, err), 2);
        ASSERT(inc == NULL);
    }
    /* "-1" (any leading negative number) hides every device: CPU ranks, filters or not */
    ASSERT_EQ(dsl_placement_cuda_visible("-1", &none, &inc, err), 3);
    ASSERT(inc == NULL);
    ASSERT_EQ(dsl_placement_cuda_visible("-1", &given[0], &inc, err), 3);
    ASSERT_EQ(dsl_placement_cuda_visible("-2,0", &none, &inc, err), 3);
    static const char *const bad_cvd[] = {"GPU-6f3c1a2b-0000", "MIG-1", "-", "-x", "1,,2", "1,", ",1",
                                          "1 2", "0x1", "1234567890"};
    for (size_t i = 0; i < sizeof(bad_cvd) / sizeof(bad_cvd[0]); i++) {
        ASSERT_EQ(dsl_placement_cuda_visible(bad_cvd[i], &none, &inc, err), DSL_EPLACEMENT);
        ASSERT(inc == NULL);
        char want[128];
        snprintf(want, sizeof(want), "CUDA_VISIBLE_DEVICES='%s' is not a list of device numbers",
                 bad_cvd[i]);
        ASSERT_CONTAINS(err, want);
    }
}

TEST(cuda_visible_devices_include_should_place_physical_ids_sorted)
{
    struct dsl_hostfile hf;
    struct dsl_placement pl;
    char err[DSL_ERR_LEN], *inc;
    struct dsl_placement_opts o = {NULL, NULL, NONE, NONE, NULL};
    dsl_hostfile_init(&hf);
    dsl_hostfile_add(&hf, "localhost", 4);
    ASSERT_EQ(dsl_placement_cuda_visible("3,1", &o, &inc, err), 1);
    o.include = inc;
    ASSERT_OK(dsl_placement_build(&pl, &hf, &o, err));
    char *json = dsl_placement_world_info_json(&pl);
    ASSERT_STR_EQ(json, "{\"localhost\": [1, 3]}");
    free(json);
    dsl_placement_release(&pl);
    free(inc);
    ASSERT_EQ(dsl_placement_cuda_visible("5", &(struct dsl_placement_opts){NULL, NULL, NONE, NONE, NULL},
                                         &inc, err), 1);
    o.include = inc;
    ASSERT_EQ(dsl_placement_build(&pl, &hf, &o, err), DSL_EPLACEMENT);
    ASSERT_STR_EQ(err, "--include 'localhost:5': host 'localhost' has no slot 5 (it has slots 0-3)");
    free(inc);
    dsl_hostfile_release(&hf);
}

TEST(local_slots_should_honour_the_override_and_validate_it)
{
    int slots = -1;
    char err[DSL_ERR_LEN];
    setenv("DSLAUNCH_LOCAL_SLOTS", "7", 1);
    ASSERT_OK(dsl_local_slots(&slots, 0, err));
    ASSERT_EQ(slots, 7);
    ASSERT_OK(dsl_local_slots(&slots, 1, err));
    ASSERT_EQ(slots, 7);
    static const char *const bad_env[] = {"0", "-1", "x", "", "4abc", " 4", "4097",
                                          "99999999999999999999"};
    for (size_t i = 0; i < sizeof(bad_env) / sizeof(bad_env[0]); i++) {
        setenv("DSLAUNCH_LOCAL_SLOTS", bad_env[i], 1);
        slots = -1;
        ASSERT_EQ(dsl_local_slots(&slots, 0, err), DSL_EUSAGE);
        ASSERT_EQ(slots, -1);
        ASSERT_CONTAINS(err, "DSLAUNCH_LOCAL_SLOTS");
        ASSERT_CONTAINS(err, bad_env[i]);
    }
    setenv("DSLAUNCH_LOCAL_SLOTS", "99999999999999999999", 1);
    ASSERT_EQ(dsl_local_slots(&slots, 0, err), DSL_EUSAGE);
    ASSERT_STR_EQ(err, "DSLAUNCH_LOCAL_SLOTS out of range: allowed 1..4096, got "
                       "'99999999999999999999'");
    unsetenv("DSLAUNCH_LOCAL_SLOTS");
    ASSERT_OK(dsl_local_slots(&slots, 0, err));
    ASSERT(slots >= 1);
    ASSERT_OK(dsl_local_slots(&slots, 1, err)); /* the online CPUs */
    ASSERT_EQ(slots, (int)sysconf(_SC_NPROCESSORS_ONLN));
}

TEST(local_slots_for_should_fit_what_is_asked_or_need_oversubscribe)
{
    char err[DSL_ERR_LEN];
    int slots = 0;
    setenv("DSLAUNCH_LOCAL_SLOTS", "2", 1);
    ASSERT_OK(dsl_local_slots_for(-1, "--num_gpus -1", 0, 0, &slots, err));
    ASSERT_EQ(slots, 2);
    ASSERT_OK(dsl_local_slots_for(2, "--num_gpus 2", 0, 0, &slots, err));
    ASSERT_EQ(slots, 2);
    ASSERT_OK(dsl_local_slots_for(1, "--num_gpus 1", 0, 0, &slots, err));
    ASSERT_EQ(slots, 2); /* the placement takes the first one */
    ASSERT_EQ(dsl_local_slots_for(4, "--nproc_per_node 4", 0, 0, &slots, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "--nproc_per_node 4 asks for 4 ranks on this node, but it has 2 "
                         "slots (DSLAUNCH_LOCAL_SLOTS): add --oversubscribe to run more ranks "
                         "than that (they share the CPUs), or ask for at most 2");
    ASSERT_OK(dsl_local_slots_for(4, "--nproc_per_node 4", 1, 0, &slots, err));
    ASSERT_EQ(slots, 4);
    unsetenv("DSLAUNCH_LOCAL_SLOTS");
}

TEST_MAIN()
