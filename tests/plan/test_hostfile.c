/*
 * Unit tests for the hostfile parser and pdsh host ranges: every accepted form and
 * every rejected one, with the exact "hostfile 'PATH':LINE:" prefix and offending text.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/plan/hostfile.h"
#include "dslaunch/common/strvec.h"
#include "test.h"

/* "[user!]name:slots[:max]@line" for every host, space-separated. */
static char *describe(const struct dsl_hostfile *hf)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 1 << 24);
    for (size_t i = 0; i < hf->nr; i++) {
        const struct dsl_host *h = &hf->hosts[i];
        dsl_dynbuf_addf(&b, "%s%s%s%s:%d", i ? " " : "", h->user ? h->user : "",
                        h->user ? "!" : "", h->name, h->slots);
        if (h->max_slots >= 0)
            dsl_dynbuf_addf(&b, ":%d", h->max_slots);
        dsl_dynbuf_addf(&b, "@%d", h->line);
    }
    char *s = strdup(dsl_dynbuf_str(&b));
    dsl_dynbuf_release(&b);
    return s;
}

static const struct {
    const char *text, *want;
} good[] = {
    {"worker-0 slots=4\nworker-1 slots=2\n", "worker-0:4@1 worker-1:2@2"},
    /* order is the file's, never sorted */
    {"b slots=1\na slots=1\nc slots=1", "b:1@1 a:1@2 c:1@3"},
    {"# comment\n\n   \nw slots=8\n", "w:8@4"},
    {"w slots=2\r\nv slots=3\r\n", "w:2@1 v:3@2"},
    {"\tw\tslots=2\t\n", "w:2@1"},
    {"w slots=2 max_slots=4\n", "w:2:4@1"},
    {"w slots=2 max_slots=2", "w:2:2@1"},
    {"w max_slots=8 slots=2", "w:2:8@1"},
    {"w slots=2 # the big one\n", "w:2@1"},
    {"w slots=2# tight comment\n", "w:2@1"},
    {"w slots=02\n", "w:2@1"},
    {"10.0.0.7 slots=1\nnode_a.example.com slots=1\n", "10.0.0.7:1@1 node_a.example.com:1@2"},
    {"node[01-04] slots=8\n", "node01:8@1 node02:8@1 node03:8@1 node04:8@1"},
    {"node[01-02,7] slots=1\nx slots=1\n", "node01:1@1 node02:1@1 node7:1@1 x:1@2"},
    {"n[8-10] slots=1", "n8:1@1 n9:1@1 n10:1@1"},
    {"n[08-10] slots=1", "n08:1@1 n09:1@1 n10:1@1"},
    {"r[1-2]n[1-2].lan slots=1", "r1n1.lan:1@1 r1n2.lan:1@1 r2n1.lan:1@1 r2n2.lan:1@1"},
    {"n[3] slots=1", "n3:1@1"},
    {"w slots=4096", "w:4096@1"},
    {"w slots=1", "w:1@1"}, /* no final newline */
    /* a UTF-8 byte order mark at the very start is skipped */
    {"\xef\xbb\xbfw slots=2\nv slots=1\n", "w:2@1 v:1@2"},
    /* "user@host": the login user is kept apart from the name (DeepSpeed passes it to
       pdsh and ssh); a range's hosts all get it */
    {"alice@w slots=2\nv slots=1\n", "alice!w:2@1 v:1@2"},
    {"bob.smith_2-x@node[1-2] slots=1 max_slots=1", "bob.smith_2-x!node1:1:1@1 "
                                                     "bob.smith_2-x!node2:1:1@1"},
    {"u@10.0.0.7 slots=1 # comment", "u!10.0.0.7:1@1"},
    {"abcdefghijklmnopqrstuvwxyz012345@w slots=1", "abcdefghijklmnopqrstuvwxyz012345!w:1@1"},
};

/* Table case i: text parsed as the hostfile h.txt into hf; the parser's result, which
 * is also printed. */
static int parse_case(struct dsl_hostfile *hf, size_t i, const char *text, char *err)
{
    dsl_hostfile_init(hf);
    int r = dsl_hostfile_parse(hf, "h.txt", text, strlen(text), err);
    fprintf(stderr, "case %zu: %s\n", i, r < 0 ? err : "parsed");
    return r;
}

TEST(hostfile_should_accept_every_documented_form)
{
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        struct dsl_hostfile hf;
        char err[DSL_ERR_LEN] = "";
        ASSERT_OK(parse_case(&hf, i, good[i].text, err));
        char *d = describe(&hf);
        ASSERT_STR_EQ(d, good[i].want);
        ASSERT_STR_EQ(hf.path, "h.txt");
        free(d);
        dsl_hostfile_release(&hf);
    }
}

static const struct {
    const char *text, *where, *what;
} bad[] = {
    {"w slots=2\nw slots=2\n", "hostfile 'h.txt':2:", "duplicate host 'w' (first on line 1)"},
    /* one machine to DNS: two agents on it would fight over its ports */
    {"worker-0 slots=2\nWorker-0 slots=2\n", "hostfile 'h.txt':2:",
     "duplicate host 'Worker-0' (first on line 1 as 'worker-0'; host names ignore case)"},
    {"a slots=1\n\nn[1-3] slots=1\nn2 slots=1\n", "hostfile 'h.txt':4:",
     "duplicate host 'n2' (first on line 3)"},
    {"n[1-2,2] slots=1\n", "hostfile 'h.txt':1:", "duplicate host 'n2' (first on line 1)"},
    {"w\n", "hostfile 'h.txt':1:", "missing slots=N in 'w'"},
    {"w max_slots=4\n", "hostfile 'h.txt':1:", "missing slots=N in 'w max_slots=4'"},
    {"w slots=\n", "hostfile 'h.txt':1:", "missing count in 'slots='"},
    {"w slots=-1\n", "hostfile 'h.txt':1:", "bad slot count '-1'"},
    {"w slots=0\n", "hostfile 'h.txt':1:", "slot count must be at least 1, not 'slots=0'"},
    {"a slots=1\nw slots=x4\n", "hostfile 'h.txt':2:", "bad slot count 'x4'"},
    {"w slots=4abc\n", "hostfile 'h.txt':1:", "bad slot count '4abc'"},
    {"w slots=+4\n", "hostfile 'h.txt':1:", "bad slot count '+4'"},
    {"w slots=4.0\n", "hostfile 'h.txt':1:", "bad slot count '4.0'"},
    {"w slots=4097\n", "hostfile 'h.txt':1:", "more than 4096 slots in 'slots=4097'"},
    {"w slots=99999999999999999999\n", "hostfile 'h.txt':1:", "more than 4096 slots"},
    {"w slots = 4\n", "hostfile 'h.txt':1:", "spaces around '=' (write slots=N) in 'slots = 4'"},
    {"w slots= 4\n", "hostfile 'h.txt':1:", "spaces around '=' (write slots=N) in 'slots= 4'"},
    {"w slots =4\n", "hostfile 'h.txt':1:", "spaces around '=' (write slots=N) in 'slots =4'"},
    {"w slots=2 max_slots = 4\n", "hostfile 'h.txt':1:", "in 'max_slots = 4'"},
    {"w slots=2 max_slots=x\n", "hostfile 'h.txt':1:", "bad max_slots count 'x'"},
    {"w slots=4 max_slots=2\n", "hostfile 'h.txt':1:", "slots above max_slots in"},
    {"w slots=2 slots=3\n", "hostfile 'h.txt':1:", "slots given twice in 'w slots=2 slots=3'"},
    {"w slots=2 max_slots=3 max_slots=3\n", "hostfile 'h.txt':1:", "max_slots given twice"},
    {"w slots=2 gpus=2\n", "hostfile 'h.txt':1:", "unexpected text 'gpus=2'"},
    {"hello world\n", "hostfile 'h.txt':1:", "unexpected text 'world'"},
    {"w slots=2 ; x\n", "hostfile 'h.txt':1:", "unexpected text '; x'"},
    {"slots=4\n", "hostfile 'h.txt':1:", "missing host name before 'slots=4'"},
    {"a b c d e f g h i\n", "hostfile 'h.txt':1:", "unexpected text"},
    {"a b@w slots=2\n", "hostfile 'h.txt':1:", "unexpected text 'b@w slots=2'"},
    {"a$b@w slots=2\n", "hostfile 'h.txt':1:", "bad user name 'a$b'"},
    {"@w slots=2\n", "hostfile 'h.txt':1:", "bad user name ''"},
    {"-l@w slots=2\n", "hostfile 'h.txt':1:", "bad user name '-l'"},
    {"r\xc3\xa9mi@w slots=2\n", "hostfile 'h.txt':1:", "bad user name 'r\xc3\xa9mi'"},
    {"abcdefghijklmnopqrstuvwxyz0123456@w slots=1\n", "hostfile 'h.txt':1:",
     "bad user name 'abcdefghijklmnopqrstuvwxyz0123456'"},
    {"u@ slots=2\n", "hostfile 'h.txt':1:", "missing host name after 'u@'"},
    {"u@v@w slots=2\n", "hostfile 'h.txt':1:", "bad host name 'v@w'"},
    {"u@-w slots=2\n", "hostfile 'h.txt':1:", "bad host name '-w'"},
    {"a@w slots=1\nb@w slots=1\n", "hostfile 'h.txt':2:", "duplicate host 'w' (first on line 1)"},
    {"w:22 slots=2\n", "hostfile 'h.txt':1:", "bad host name 'w:22'"},
    {"-oProxyCommand=x slots=1\n", "hostfile 'h.txt':1:", "missing host name before"},
    {"-w slots=1\n", "hostfile 'h.txt':1:", "bad host name '-w'"},
    {"a,b slots=1\n", "hostfile 'h.txt':1:", "bad host name 'a,b'"},
    {"w\x01 slots=1\n", "hostfile 'h.txt':1:", "bad host name 'w\\x01'"},
    /* terminal escape sequences are shown, not sent to the terminal */
    {"w\x1b[31m slots=1\n", "hostfile 'h.txt':1:", "bad host range 'w\\x1b[31m': unclosed '['"},
    {"w\x1b]0;title\x07 slots=1\n", "hostfile 'h.txt':1:", "bad host range 'w\\x1b]0;title\\x07': unmatched ']'"},
    {"w slots=1\x1b[2J\n", "hostfile 'h.txt':1:", "bad slot count '1\\x1b[2J'"},
    {"w\xc2\x9b" "2J slots=1\n", "hostfile 'h.txt':1:", "bad host name 'w\\u009b2J'"},
    /* a byte order mark anywhere but the start is text like any other */
    {"w slots=1\n\xef\xbb\xbfv slots=1\n", "hostfile 'h.txt':2:", "bad host name '\xef\xbb\xbfv'"},
    {"node[1-2 slots=1\n", "hostfile 'h.txt':1:", "bad host range 'node[1-2': unclosed '['"},
    {"node1-2] slots=1\n", "hostfile 'h.txt':1:", "bad host range 'node1-2]': unmatched ']'"},
    {"node[4-1] slots=1\n", "hostfile 'h.txt':1:", "bad host range 'node[4-1]': reversed range '4-1'"},
    {"node[] slots=1\n", "hostfile 'h.txt':1:", "bad host range 'node[]': empty brackets"},
    {"node[a-b] slots=1\n", "hostfile 'h.txt':1:", "bad item 'a-b' in '[a-b]'"},
    {"node[1,] slots=1\n", "hostfile 'h.txt':1:", "bad item '' in '[1,]'"},
    {"node[1-] slots=1\n", "hostfile 'h.txt':1:", "bad item '1-'"},
    {"node[-1] slots=1\n", "hostfile 'h.txt':1:", "bad item '-1'"},
    {"node[1-2-3] slots=1\n", "hostfile 'h.txt':1:", "bad item '1-2-3'"},
    {"node[[1]] slots=1\n", "hostfile 'h.txt':1:", "nested '['"},
    {"node[1234567890] slots=1\n", "hostfile 'h.txt':1:", "bad item '1234567890'"},
    {"node[1-999999] slots=1\n", "hostfile 'h.txt':1:", "more than 65536 hosts"},
    {"n[1-300]m[1-300] slots=1\n", "hostfile 'h.txt':1:", "more than 65536 hosts"},
    {"n[1][1][1][1][1][1][1][1][1] slots=1\n", "hostfile 'h.txt':1:", "more than 8 bracket groups"},
    {"", "hostfile 'h.txt':", "no hosts"},
    {"# only comments\n\n\t\n", "hostfile 'h.txt':", "no hosts"},
};

TEST(hostfile_should_reject_bad_lines_with_path_line_and_text)
{
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct dsl_hostfile hf;
        char err[DSL_ERR_LEN] = "";
        ASSERT_EQ(parse_case(&hf, i, bad[i].text, err), DSL_EHOSTFILE);
        ASSERT_CONTAINS(err, bad[i].where);
        ASSERT_CONTAINS(err, bad[i].what);
        ASSERT_EQ(hf.nr, 0);
        ASSERT(hf.hosts == NULL && hf.path == NULL);
    }
}

TEST(hostfile_should_reject_a_nul_byte_and_read_only_len_bytes)
{
    static const char text[] = "w slots=1\nx\0 slots=1\n";
    struct dsl_hostfile hf;
    char err[DSL_ERR_LEN];
    dsl_hostfile_init(&hf);
    ASSERT_EQ(dsl_hostfile_parse(&hf, "h.txt", text, sizeof(text) - 1, err), DSL_EHOSTFILE);
    ASSERT_STR_EQ(err, "hostfile 'h.txt':2: NUL byte in 'x\\x00 slots=1'");
    /* not NUL-terminated: only the first len bytes count */
    static const char cut[] = {'w', ' ', 's', 'l', 'o', 't', 's', '=', '1', 'x'};
    ASSERT_OK(dsl_hostfile_parse(&hf, NULL, cut, 9, err));
    ASSERT_EQ(hf.hosts[0].slots, 1);
    ASSERT(hf.path == NULL);
    dsl_hostfile_release(&hf);
    ASSERT_EQ(dsl_hostfile_parse(&hf, NULL, cut, 10, err), DSL_EHOSTFILE);
    ASSERT_STR_EQ(err, "hostfile '-':1: bad slot count '1x'");
}

TEST(hostfile_should_reject_zero_slots)
{
    struct dsl_hostfile hf;
    char err[DSL_ERR_LEN];
    dsl_hostfile_init(&hf);
    ASSERT_EQ(dsl_hostfile_parse(&hf, "hosts.txt", "a slots=1\nb slots=0", 19, err),
              DSL_EHOSTFILE);
    ASSERT_STR_EQ(err, "hostfile 'hosts.txt':2: slot count must be at least 1, not 'slots=0'");
}

TEST(hostfile_should_quote_long_offending_text_shortened)
{
    char text[400];
    memset(text, 'x', sizeof(text));
    memcpy(text, "w slots=1 ", 10);
    struct dsl_hostfile hf;
    char err[DSL_ERR_LEN];
    dsl_hostfile_init(&hf);
    ASSERT_EQ(dsl_hostfile_parse(&hf, "h", text, sizeof(text), err), DSL_EHOSTFILE);
    ASSERT_CONTAINS(err, "unexpected text 'xxxx");
    ASSERT_CONTAINS(err, "...'");
    ASSERT(strlen(err) < 160);
}

TEST(hostfile_should_load_a_file_and_report_a_missing_one)
{
    char path[] = "/tmp/dsl-hostfile-XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    const char *text = "worker-0 slots=2\nworker-1 slots=x4\n";
    ASSERT_EQ(write(fd, text, strlen(text)), (long long)strlen(text));
    close(fd);

    struct dsl_hostfile hf;
    char err[DSL_ERR_LEN], want[256];
    dsl_hostfile_init(&hf);
    ASSERT_EQ(dsl_hostfile_load(&hf, path, err), DSL_EHOSTFILE);
    snprintf(want, sizeof(want), "hostfile '%s':2: bad slot count 'x4'", path);
    ASSERT_STR_EQ(err, want);

    FILE *f = fopen(path, "w");
    fputs("worker-0 slots=2\nworker-1 slots=4\n", f);
    fclose(f);
    ASSERT_OK(dsl_hostfile_load(&hf, path, err));
    ASSERT_EQ(hf.nr, 2);
    ASSERT_STR_EQ(hf.path, path);
    ASSERT_EQ(dsl_hostfile_find(&hf, "worker-1")->slots, 4);
    ASSERT_EQ(dsl_hostfile_find(&hf, "worker-1")->line, 2);
    ASSERT(dsl_hostfile_find(&hf, "worker-2") == NULL);
    dsl_hostfile_release(&hf);
    unlink(path);

    ASSERT_EQ(dsl_hostfile_load(&hf, "/nonexistent/hosts", err), -ENOENT);
    ASSERT_STR_EQ(err, "hostfile '/nonexistent/hosts': No such file or directory");
    ASSERT_EQ(dsl_hostfile_load(&hf, "/tmp", err), -EISDIR);
    ASSERT_CONTAINS(err, "hostfile '/tmp': ");
}

TEST(hostfile_should_synthesise_hosts_with_add)
{
    struct dsl_hostfile hf;
    dsl_hostfile_init(&hf);
    dsl_hostfile_add(&hf, "localhost", 4);
    ASSERT_EQ(hf.nr, 1);
    ASSERT_STR_EQ(hf.hosts[0].name, "localhost");
    ASSERT_EQ(hf.hosts[0].slots, 4);
    ASSERT_EQ(hf.hosts[0].max_slots, -1);
    ASSERT_EQ(hf.hosts[0].line, 0);
    ASSERT(hf.path == NULL);
    dsl_hostfile_release(&hf);
    ASSERT_EQ(hf.nr, 0);
}

TEST(hostfile_should_parse_many_hosts_in_linear_time)
{
    /* 2 x 30000 hosts: a quadratic duplicate check would take minutes here */
    const char *text = "a[1-30000] slots=1\nb[00001-30000] slots=2\n";
    struct dsl_hostfile hf;
    char err[DSL_ERR_LEN];
    dsl_hostfile_init(&hf);
    ASSERT_OK(dsl_hostfile_parse(&hf, "big", text, strlen(text), err));
    ASSERT_EQ(hf.nr, 60000);
    ASSERT_STR_EQ(hf.hosts[29999].name, "a30000");
    ASSERT_STR_EQ(hf.hosts[30000].name, "b00001");
    dsl_hostfile_release(&hf);
    const char *dup = "a[1-30000] slots=1\nb slots=1\na[29999-30001] slots=1\n";
    dsl_hostfile_init(&hf);
    ASSERT_EQ(dsl_hostfile_parse(&hf, "big", dup, strlen(dup), err), DSL_EHOSTFILE);
    ASSERT_STR_EQ(err, "hostfile 'big':3: duplicate host 'a29999' (first on line 1)");
}

TEST(hostrange_should_expand_and_keep_zero_padding)
{
    static const struct {
        const char *spec, *want;
    } cases[] = {
        {"plain", "plain"},
        {"node[01-04,7]", "node01 node02 node03 node04 node7"},
        {"node[7,01-02]", "node7 node01 node02"},
        {"n[9-11]x", "n9x n10x n11x"},
        {"n[098-100]", "n098 n099 n100"},
        {"n[0-1]", "n0 n1"},
        {"[1-2]", "1 2"},
        {"a[1-2]b[3-4]", "a1b3 a1b4 a2b3 a2b4"},
        {"n[5]", "n5"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct dsl_strvec out;
        struct dsl_dynbuf b;
        char err[DSL_ERR_LEN] = "";
        dsl_strvec_init(&out);
        dsl_dynbuf_init(&b, 4096);
        ASSERT_OK(dsl_hostrange_expand(cases[i].spec, &out, err));
        for (size_t k = 0; k < out.nr; k++)
            dsl_dynbuf_addf(&b, "%s%s", k ? " " : "", out.v[k]);
        ASSERT_STR_EQ(dsl_dynbuf_str(&b), cases[i].want);
        dsl_dynbuf_release(&b);
        dsl_strvec_release(&out);
    }
}

TEST(hostrange_should_reject_malformed_reversed_and_huge_ranges)
{
    static const struct {
        const char *spec, *what;
    } cases[] = {
        {"n[1-2", "unclosed '['"},
        {"n]", "unmatched ']'"},
        {"n]1[", "unmatched ']'"},
        {"n[2-1]", "reversed range '2-1'"},
        {"n[]", "empty brackets"},
        {"n[,]", "bad item ''"},
        {"n[x]", "bad item 'x'"},
        {"n[1-99999999]", "more than 65536 hosts"},
        {"n[0-65535]", "more than 65536 hosts"}, /* 65536 names is at the limit... */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct dsl_strvec out;
        char err[DSL_ERR_LEN] = "";
        dsl_strvec_init(&out);
        dsl_strvec_push(&out, "kept");
        int r = dsl_hostrange_expand(cases[i].spec, &out, err);
        if (i == sizeof(cases) / sizeof(cases[0]) - 1) {
            /* ...and allowed: exactly DSL_HOSTFILE_MAX_HOSTS */
            ASSERT_OK(r);
            ASSERT_EQ(out.nr, 1 + 65536);
            dsl_strvec_release(&out);
            continue;
        }
        ASSERT_EQ(r, -EINVAL);
        ASSERT_CONTAINS(err, "bad host range '");
        ASSERT_CONTAINS(err, cases[i].what);
        ASSERT_EQ(out.nr, 1);
        dsl_strvec_release(&out);
    }
    char big[1100];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    struct dsl_strvec out;
    char err[DSL_ERR_LEN];
    dsl_strvec_init(&out);
    ASSERT_EQ(dsl_hostrange_expand(big, &out, err), -EINVAL);
    ASSERT_CONTAINS(err, "longer than 1024 bytes");
}

TEST(host_name_valid_should_accept_dns_names_only)
{
    ASSERT(dsl_host_name_valid("worker-0"));
    ASSERT(dsl_host_name_valid("10.1.2.3"));
    ASSERT(dsl_host_name_valid("a_b.example.com"));
    ASSERT(!dsl_host_name_valid(""));
    ASSERT(!dsl_host_name_valid("-x"));
    ASSERT(!dsl_host_name_valid("a b"));
    ASSERT(!dsl_host_name_valid("a:b"));
    ASSERT(!dsl_host_name_valid("a@b"));
    ASSERT(!dsl_host_name_valid("fe80::1"));
    ASSERT(!dsl_host_name_valid("h\xc3\xa9"));
    char longname[300];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    ASSERT(!dsl_host_name_valid(longname));
    longname[253] = '\0';
    ASSERT(dsl_host_name_valid(longname));
}

TEST_MAIN()
