/*
 * Quoting for the few command lines dslaunch sends through a remote shell, each a fixed
 * command whose only variable words are paths and host names: the agent's
 * exec '<remote dslaunch>' --agent ... (ssh, pdsh), and the operator tools' remote
 * `sha256sum` (sync), `mv -f` (ssh-setup's file writes) and node-to-node check
 * (ssh-setup --mesh). No option value or environment variable of the user's is ever
 * part of one: those travel as data on the control channel. Every word is wrapped in
 * single quotes, inside which a POSIX shell interprets nothing; a single quote itself
 * is written as '\'' (close, escaped quote, reopen). The empty string becomes ''.
 */
#include <stdlib.h>
#include <string.h>

#include "dslaunch/remote/transport.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

char *dsl_shell_quote(const char *s)
{
    size_t quotes = 0, n = strlen(s);
    for (size_t i = 0; i < n; i++)
        quotes += s[i] == '\'';
    char *out = dsl_xmalloc(n + 3 * quotes + 3);
    size_t o = 0;
    out[o++] = '\'';
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\'') {
            memcpy(out + o, "'\\''", 4);
            o += 4;
        } else {
            out[o++] = s[i];
        }
    }
    out[o++] = '\'';
    out[o] = '\0';
    return out;
}

char *dsl_shell_command(char *const *argv)
{
    size_t len = 5;
    char **q = dsl_xcalloc(1, sizeof(*q));
    size_t nq = 0;
    for (; argv[nq]; nq++) {
        q = dsl_xreallocarray(q, nq + 2, sizeof(*q));
        q[nq] = dsl_shell_quote(argv[nq]);
        len += strlen(q[nq]) + 1;
    }
    char *out = dsl_xmalloc(len + 1);
    memcpy(out, "exec", 4);
    size_t o = 4;
    for (size_t i = 0; i < nq; i++) {
        size_t l = strlen(q[i]);
        out[o++] = ' ';
        memcpy(out + o, q[i], l);
        o += l;
        free(q[i]);
    }
    out[o] = '\0';
    free(q);
    return out;
}
