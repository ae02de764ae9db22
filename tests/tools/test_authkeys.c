/* Unit tests of ssh-setup's line logic: authorized_keys, known_hosts, config, modes. */
#include <stdlib.h>
#include <string.h>

#include "tools/authkeys.h"
#include "dslaunch/common/error.h"
#include "test.h"

#define KEY_A "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAA"
#define KEY_B "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBBBB"

TEST(authkeys_should_find_the_key_after_quoted_options)
{
    static const struct {
        const char *line;
        const char *type, *blob; /* NULL: no key */
    } cases[] = {
        {KEY_A " me@host", "ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAIAAAA"},
        {"from=\"10.0.0.1,x y\",no-pty " KEY_B, "ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAIBBBB"},
        {"command=\"echo ssh-rsa X\" ecdsa-sha2-nistp256 QQQ c", "ecdsa-sha2-nistp256", "QQQ"},
        {"  \t" KEY_A "\n", "ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAIAAAA"},
        {"# " KEY_A, NULL, NULL},
        {"", NULL, NULL},
        {"   \n", NULL, NULL},
        {"ssh-ed25519", NULL, NULL},
        {"garbage line", NULL, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *t, *b;
        size_t tl, bl;
        int r = dsl_authkeys_find_key(cases[i].line, &t, &tl, &b, &bl);
        if (!cases[i].type) {
            ASSERT_EQ(r, -1);
            continue;
        }
        ASSERT_EQ(r, 0);
        ASSERT_EQ(tl, strlen(cases[i].type));
        ASSERT(!memcmp(t, cases[i].type, tl));
        ASSERT_EQ(bl, strlen(cases[i].blob));
        ASSERT(!memcmp(b, cases[i].blob, bl));
    }
}

TEST(authkeys_merge_should_add_a_missing_key_once_and_keep_the_rest)
{
    static const struct {
        const char *text, *want; /* want NULL: already present */
    } cases[] = {
        {NULL, KEY_A " dslaunch\n"},
        {"", KEY_A " dslaunch\n"},
        {KEY_B " other\n", KEY_B " other\n" KEY_A " dslaunch\n"},
        {KEY_B " no newline", KEY_B " no newline\n" KEY_A " dslaunch\n"},
        {KEY_A " another comment\n", NULL},
        {"# c\nno-pty " KEY_A "\n", NULL},
        {KEY_B "\n" KEY_A, NULL},
        {"# " KEY_A "\n", "# " KEY_A "\n" KEY_A " dslaunch\n"},
        {"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAAX\n",
         "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAAX\n" KEY_A " dslaunch\n"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *out = (char *)1;
        int r = dsl_authkeys_merge(cases[i].text, KEY_A " dslaunch", &out);
        if (!cases[i].want) {
            ASSERT_EQ(r, 0);
            ASSERT(out == NULL);
        } else {
            ASSERT_EQ(r, 1);
            ASSERT_STR_EQ(out, cases[i].want);
            /* merging again is a no-op: idempotent */
            char *again = (char *)1;
            ASSERT_EQ(dsl_authkeys_merge(out, KEY_A " x", &again), 0);
            ASSERT(again == NULL);
            free(out);
        }
    }
}

TEST(authkeys_merge_should_reject_a_line_without_a_key)
{
    char *out = (char *)1;
    ASSERT_EQ(dsl_authkeys_merge("", "not a key", &out), DSL_EUSAGE);
    ASSERT(out == NULL);
}

TEST(knownhosts_line_should_bracket_names_for_ports_other_than_22)
{
    static const struct {
        const char *names[3];
        size_t n;
        int port;
        const char *want;
    } cases[] = {
        {{"node1", "10.0.0.2", NULL}, 2, 22, "node1,10.0.0.2 ssh-ed25519 BLOB"},
        {{"node1", "10.0.0.2", NULL}, 2, 0, "node1,10.0.0.2 ssh-ed25519 BLOB"},
        {{"node1", "10.0.0.2", NULL}, 2, 2222, "[node1]:2222,[10.0.0.2]:2222 ssh-ed25519 BLOB"},
        {{"node1", "node1", "x"}, 3, 22, "node1,x ssh-ed25519 BLOB"},
        {{"node1", "", NULL}, 3, 22, "node1 ssh-ed25519 BLOB"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *l = dsl_knownhosts_line(cases[i].names, cases[i].n, cases[i].port, "ssh-ed25519",
                                      "BLOB");
        ASSERT_STR_EQ(l, cases[i].want);
        free(l);
    }
}

TEST(knownhosts_merge_should_add_only_entries_not_covered)
{
    static const struct {
        const char *text, *line;
        int want; /* 1 added, 0 present */
    } cases[] = {
        {NULL, "n1,10.0.0.2 " KEY_A, 1},
        {"n1,10.0.0.2 " KEY_A "\n", "n1,10.0.0.2 " KEY_A, 0},
        {"10.0.0.2,n1 " KEY_A "\n", "n1,10.0.0.2 " KEY_A, 0},
        {"n1,10.0.0.2,n1.example " KEY_A "\n", "n1 " KEY_A, 0},
        {"n1 " KEY_A "\n", "n1,10.0.0.2 " KEY_A, 1},          /* the address is missing */
        {"n1,10.0.0.2 " KEY_B "\n", "n1,10.0.0.2 " KEY_A, 1}, /* another key */
        {"[n1]:2222 " KEY_A "\n", "n1 " KEY_A, 1},            /* another port */
        {"[n1]:2222 " KEY_A "\n", "[n1]:2222 " KEY_A, 0},
        {"@revoked n1 " KEY_A "\n", "n1 " KEY_A, 1},
        {"# n1 " KEY_A "\n", "n1 " KEY_A, 1},
        {"n10 " KEY_A "\n", "n1 " KEY_A, 1},                  /* no prefix matching */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *out = NULL;
        int r = dsl_knownhosts_merge(cases[i].text, cases[i].line, &out);
        ASSERT_EQ(r, cases[i].want);
        if (r == 1) {
            ASSERT(out != NULL);
            ASSERT_CONTAINS(out, cases[i].line);
            if (cases[i].text)
                ASSERT(!strncmp(out, cases[i].text, strlen(cases[i].text)));
            char *again = NULL;
            ASSERT_EQ(dsl_knownhosts_merge(out, cases[i].line, &again), 0);
            free(out);
        } else {
            ASSERT(out == NULL);
        }
    }
    char *out = NULL;
    ASSERT_EQ(dsl_knownhosts_merge("", "n1", &out), DSL_EUSAGE);
    ASSERT_EQ(dsl_knownhosts_merge("", "@revoked n1 " KEY_A, &out), DSL_EUSAGE);
}

#define MANAGED(block) DSL_SSHCONFIG_BEGIN "\n" block DSL_SSHCONFIG_RESET DSL_SSHCONFIG_END "\n"

TEST(sshconfig_merge_should_put_the_managed_block_first_and_keep_the_rest_in_scope)
{
    const char *block = "Host a b\n  IdentityFile ~/.ssh/id_dslaunch\n";
    char *out = NULL, *again = NULL, *moved = NULL;
    /* options before any Host line apply to every host: after the block's "Host *"
     * they still do */
    ASSERT_EQ(dsl_sshconfig_merge("User u\nHost x\n  Port 2\n", block, &out), 1);
    ASSERT_STR_EQ(out, MANAGED("Host a b\n  IdentityFile ~/.ssh/id_dslaunch\n")
                       "User u\nHost x\n  Port 2\n");
    ASSERT_EQ(dsl_sshconfig_merge(out, block, &again), 0);
    ASSERT(again == NULL);
    /* a changed host list replaces the block and keeps what follows it */
    ASSERT_EQ(dsl_sshconfig_merge(out, "Host c\n", &moved), 1);
    ASSERT_STR_EQ(moved, MANAGED("Host c\n") "User u\nHost x\n  Port 2\n");
    free(moved);
    free(out);
    /* a block further down (older versions appended it) moves to the top */
    ASSERT_EQ(dsl_sshconfig_merge("Host x\n  Port 2\n" MANAGED("Host c\n") "Host y\n",
                                  "Host c\n", &moved), 1);
    ASSERT_STR_EQ(moved, MANAGED("Host c\n") "Host x\n  Port 2\nHost y\n");
    free(moved);
    ASSERT_EQ(dsl_sshconfig_merge(NULL, "Host c\n", &out), 1);
    ASSERT_STR_EQ(out, MANAGED("Host c\n"));
    free(out);
    ASSERT_EQ(dsl_sshconfig_merge("Host x", "Host c\n", &out), 1);
    ASSERT_STR_EQ(out, MANAGED("Host c\n") "Host x\n");
    free(out);
}

TEST(sshperm_fix_should_change_only_modes_sshd_or_ssh_refuse)
{
    static const struct {
        enum dsl_sshperm_kind kind;
        unsigned int mode;
        int want;
    } cases[] = {
        {DSL_SSHPERM_HOME, 0755, -1},
        {DSL_SSHPERM_HOME, 0775, 0755},
        {DSL_SSHPERM_HOME, 0777, 0755},
        {DSL_SSHPERM_HOME, 0700, -1},
        {DSL_SSHPERM_SSHDIR, 0700, -1},
        {DSL_SSHPERM_SSHDIR, 0755, -1},
        {DSL_SSHPERM_SSHDIR, 0777, 0700},
        {DSL_SSHPERM_SSHDIR, 0720, 0700},
        {DSL_SSHPERM_AUTHKEYS, 0600, -1},
        {DSL_SSHPERM_AUTHKEYS, 0644, -1},
        {DSL_SSHPERM_AUTHKEYS, 0664, 0600},
        {DSL_SSHPERM_AUTHKEYS, 0666, 0600},
        {DSL_SSHPERM_PRIVKEY, 0600, -1},
        {DSL_SSHPERM_PRIVKEY, 0400, -1},
        {DSL_SSHPERM_PRIVKEY, 0640, 0600},
        {DSL_SSHPERM_PRIVKEY, 0644, 0600},
        {DSL_SSHPERM_CONFIG, 0644, -1},
        {DSL_SSHPERM_CONFIG, 0666, 0600},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *why = "unset";
        int r = dsl_sshperm_fix(cases[i].kind, cases[i].mode, &why);
        ASSERT_EQ(r, cases[i].want);
        if (r < 0)
            ASSERT(why == NULL);
        else
            ASSERT(why != NULL && why[0] != '\0');
    }
}

TEST_MAIN()
