/*
 * libFuzzer target: the texts the operator tools read from other hosts or programs.
 * The first byte picks one; the rest, up to a NUL, is the text:
 *   0  a remote ~/.ssh/authorized_keys that ssh-setup merges its key into, and the
 *      same bytes as a key line merged into a fixed file; merging twice adds nothing
 *   1  a remote ~/.ssh/known_hosts that a node's host key is merged into; idempotent
 *   2  a ~/.ssh/config that the managed block goes into; idempotent, block on top
 *   3  dsbench's output as `dslaunch doctor` reads it: every line through
 *      dsl_doctor_parse_busbw, whose bandwidth is a finite, non-negative number
 *   4  the other host's sha256sum output as `dslaunch sync --checksum` reads it: every
 *      line through dsl_sha256_parse_sum_line (with libssh builds), whose hash is 64
 *      lowercase hex digits and whose path is never longer than its line
 * Every line of the text also goes through dsl_authkeys_find_key, whose spans must lie
 * inside the line.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/xalloc.h"
#include "dslaunch/tools/doctor.h"
#include "tools/authkeys.h"
#ifdef DSL_HAVE_SSH
#include "tools/digest.h"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define KEY "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAA"

static void merged_once(int (*merge)(const char *, const char *, char **), const char *text,
                        const char *entry)
{
    char *out = NULL, *again = NULL;
    int r = merge(text, entry, &out);
    if (r == 1) {
        if (!out || merge(out, entry, &again) != 0 || again)
            abort(); /* what was merged is found the next time */
        if (strncmp(out, text, strlen(text)) != 0 && merge != dsl_sshconfig_merge)
            abort(); /* keys are appended: the old text stays as it was */
    } else if (r != 0 || out) {
        abort();
    }
    free(out);
}

static void each_line(const char *s, int what)
{
    for (const char *l = s; *l;) {
        size_t len = strcspn(l, "\n");
        char *line = dsl_xstrndup(l, len);
        const char *type, *blob;
        size_t tlen, blen;
        if (dsl_authkeys_find_key(line, &type, &tlen, &blob, &blen) == 0 &&
            (type < line || type + tlen > line + len || blob < line || blob + blen > line + len ||
             !tlen || !blen))
            abort();
        double gbps = -1;
        if (what == 3 && dsl_doctor_parse_busbw(line, &gbps) == 1 && (!isfinite(gbps) || gbps < 0))
            abort();
#ifdef DSL_HAVE_SSH
        char hex[65], *path = NULL;
        if (what == 4 && dsl_sha256_parse_sum_line(line, len, hex, &path) == 0) {
            if (strlen(hex) != 64 || strspn(hex, "0123456789abcdef") != 64 || !path ||
                strlen(path) + 66 > len)
                abort();
            free(path);
        }
#endif
        free(line);
        l += len;
        if (*l)
            l++;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char *s = dsl_xstrndup((const char *)data + 1, size - 1);
    switch (data[0] % 5) {
    case 0: {
        merged_once(dsl_authkeys_merge, s, KEY " dslaunch");
        char *out = NULL;
        int r = dsl_authkeys_merge("# keys\n" KEY " old\n", s, &out);
        if (r == 1 && !out)
            abort();
        free(out);
        break;
    }
    case 1: {
        const char *names[] = {"worker-0", "10.0.0.2"};
        char *line = dsl_knownhosts_line(names, 2, data[0] & 8 ? 2222 : 22, "ssh-ed25519",
                                         "AAAAC3NzaC1lZDI1NTE5AAAAIAAAA");
        merged_once(dsl_knownhosts_merge, s, line);
        free(line);
        break;
    }
    case 2: {
        char *out = NULL;
        const char *block = "Host worker-*\n  IdentityFile ~/.ssh/id_dslaunch\n";
        merged_once(dsl_sshconfig_merge, s, block);
        if (dsl_sshconfig_merge(s, block, &out) == 1 &&
            strncmp(out, DSL_SSHCONFIG_BEGIN, strlen(DSL_SSHCONFIG_BEGIN)) != 0)
            abort();
        free(out);
        break;
    }
    }
    each_line(s, data[0] % 5);
    free(s);
    return 0;
}
