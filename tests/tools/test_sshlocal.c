/* Unit tests of ssh-setup's local side: the key pair and the atomic file writes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "tools/sshlocal.h"
#include "test.h"

static char *tmpdir(void)
{
    char tmpl[] = "/tmp/dsl-sshlocal.XXXXXX";
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

static void rmtree(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

static unsigned int mode_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (unsigned int)(st.st_mode & 07777) : 0xffffu;
}

TEST(keypair_should_be_created_once_with_private_mode_0600_and_then_reused)
{
    char *d = tmpdir(), path[400], pub[420], err[DSL_ERR_LEN];
    ASSERT(d != NULL);
    snprintf(path, sizeof(path), "%s/id_test", d);
    snprintf(pub, sizeof(pub), "%s.pub", path);
    struct dsl_sshkeypair a, b;
    ASSERT_OK(dsl_sshkeypair_load(&a, path, err));
    ASSERT_EQ(mode_of(path), 0600);
    ASSERT_EQ(mode_of(pub), 0644);
    ASSERT_STR_EQ(a.name, "id_test");
    ASSERT(!strncmp(a.pub_line, "ssh-ed25519 AAAA", 16));
    ASSERT_CONTAINS(a.priv_text, "BEGIN OPENSSH PRIVATE KEY");
    /* a second load reuses the pair: same public key, files untouched */
    ASSERT_OK(dsl_sshkeypair_load(&b, path, err));
    ASSERT_STR_EQ(a.pub_line, b.pub_line);
    ASSERT_STR_EQ(a.priv_text, b.priv_text);
    dsl_sshkeypair_release(&a);
    dsl_sshkeypair_release(&b);
    ASSERT(a.path == NULL && a.key == NULL);
    rmtree(d);
    free(d);
}

TEST(keypair_should_refuse_a_pub_file_of_another_key)
{
    char *d = tmpdir(), path[400], other[400], pub[420], err[DSL_ERR_LEN];
    ASSERT(d != NULL);
    snprintf(path, sizeof(path), "%s/id_a", d);
    snprintf(other, sizeof(other), "%s/id_b", d);
    snprintf(pub, sizeof(pub), "%s.pub", path);
    struct dsl_sshkeypair a, b;
    ASSERT_OK(dsl_sshkeypair_load(&a, path, err));
    ASSERT_OK(dsl_sshkeypair_load(&b, other, err));
    FILE *f = fopen(pub, "w");
    ASSERT(f != NULL);
    fprintf(f, "%s\n", b.pub_line);
    fclose(f);
    dsl_sshkeypair_release(&a);
    ASSERT_EQ(dsl_sshkeypair_load(&a, path, err), DSL_EAUTH);
    ASSERT_CONTAINS(err, "does not hold the public key");
    ASSERT(a.path == NULL);
    dsl_sshkeypair_release(&b);
    rmtree(d);
    free(d);
}

TEST(keypair_should_tighten_a_private_key_readable_by_others)
{
    char *d = tmpdir(), path[400], err[DSL_ERR_LEN];
    ASSERT(d != NULL);
    snprintf(path, sizeof(path), "%s/id_c", d);
    struct dsl_sshkeypair a;
    ASSERT_OK(dsl_sshkeypair_load(&a, path, err));
    dsl_sshkeypair_release(&a);
    ASSERT_OK(chmod(path, 0644));
    ASSERT_OK(dsl_sshkeypair_load(&a, path, err));
    ASSERT_EQ(mode_of(path), 0600);
    dsl_sshkeypair_release(&a);
    rmtree(d);
    free(d);
}

TEST(sshlocal_write_should_replace_the_file_and_keep_its_mode)
{
    char *d = tmpdir(), path[400], tmp[440], err[DSL_ERR_LEN];
    char *text = NULL;
    ASSERT(d != NULL);
    snprintf(path, sizeof(path), "%s/known_hosts", d);
    snprintf(tmp, sizeof(tmp), "%s.dslaunch-tmp", path);
    ASSERT_OK(dsl_sshlocal_write(path, "a\n", 0600, err));
    ASSERT_EQ(mode_of(path), 0600);
    ASSERT_OK(chmod(path, 0640));
    ASSERT_OK(dsl_sshlocal_write(path, "a\nb\n", 0600, err));
    ASSERT_EQ(mode_of(path), 0640);
    ASSERT_OK(dsl_sshlocal_read(path, &text, err));
    ASSERT_STR_EQ(text, "a\nb\n");
    ASSERT(access(tmp, F_OK) != 0);
    free(text);
    /* a missing file is an error with the path in the message */
    ASSERT(dsl_sshlocal_read("/nonexistent/dsl/x", &text, err) < 0);
    ASSERT(text == NULL);
    ASSERT_CONTAINS(err, "/nonexistent/dsl/x");
    rmtree(d);
    free(d);
}

TEST_MAIN()
