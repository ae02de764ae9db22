/*
 * What the remote tests read back from a shell or a file: a program's stdout captured
 * through /bin/sh, a buffer handed over as a C string, and the NUL-terminated words that
 * `printf '%s\0' ...` writes, compared with the words that went in.
 */
#ifndef DSL_TEST_SH_OUTPUT_H
#define DSL_TEST_SH_OUTPUT_H

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dslaunch/common/dynbuf.h"
#include "test.h"

/* b's bytes as a malloc'd C string (*len bytes before the NUL); b is released. */
static inline char *dynbuf_take(struct dsl_dynbuf *b, size_t *len)
{
    char *out = malloc(b->len + 1);
    ASSERT(out != NULL);
    memcpy(out, dsl_dynbuf_str(b), b->len + 1);
    *len = b->len;
    dsl_dynbuf_release(b);
    return out;
}

/* Run cmd with /bin/sh -c, which must exit 0, and return its stdout (*len bytes). */
static inline char *sh_output(const char *cmd, size_t *len)
{
    int p[2];
    ASSERT_OK(pipe(p));
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 1 << 20);
    char chunk[4096];
    ssize_t got;
    while ((got = read(p[0], chunk, sizeof(chunk))) > 0)
        ASSERT_OK(dsl_dynbuf_add(&b, chunk, (size_t)got));
    close(p[0]);
    int st;
    ASSERT(waitpid(pid, &st, 0) == pid);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    return dynbuf_take(&b, len);
}

/* out (len bytes) is exactly the n words of want, each ended by a NUL. */
static inline void assert_nul_words(const char *out, size_t len, const char *const *want, size_t n)
{
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        ASSERT(off < len);
        ASSERT_STR_EQ(out + off, want[i]);
        off += strlen(want[i]) + 1;
    }
    ASSERT_EQ(off, len);
}

#endif
