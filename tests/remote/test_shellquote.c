/*
 * Unit tests for dsl_shell_quote(): the exact quoting, and /bin/sh round trips showing
 * that every quoted string is exactly one word whose value is the input, byte for byte
 * (spaces, quotes, $(), backquotes, globs, newlines, the empty string, non-ASCII, and
 * every byte value 1..255 at once).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/remote/transport.h"
#include "sh_output.h"
#include "test.h"

TEST(shell_quote_should_produce_the_exact_posix_form)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"", "''"},
        {"a", "'a'"},
        {"two words", "'two words'"},
        {"'", "''\\'''"},
        {"''", "''\\'''\\'''"},
        {"it's", "'it'\\''s'"},
        {"\\", "'\\'"},
        {"$(id)", "'$(id)'"},
        {"a\nb", "'a\nb'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *q = dsl_shell_quote(cases[i].in);
        ASSERT_STR_EQ(q, cases[i].out);
        free(q);
    }
}

/*
 * Run `set -- WORDS; printf '%s|' "$#"; printf '%s\0' "$@"` with /bin/sh and return
 * its stdout (len bytes): the word count, then every word NUL-terminated.
 */
static char *sh_words(const char *words, size_t *len)
{
    char *script = NULL;
    size_t n = strlen(words) + 64;
    script = malloc(n);
    ASSERT(script != NULL);
    snprintf(script, n, "set -- %s; printf '%%s|' \"$#\"; printf '%%s\\0' \"$@\"", words);
    char *out = sh_output(script, len);
    free(script);
    return out;
}

static const char *const nasty[] = {
    "",
    " ",
    "  spaced  out  ",
    "I am 6' tall",
    "'",
    "'''",
    "\"double\" and 'single'",
    "$(touch /tmp/dsl-shellquote-pwned)",
    "`touch /tmp/dsl-shellquote-pwned`",
    "${HOME} $HOME $1 $@ $$",
    "a\nb\n\nc",
    "tab\there",
    "semi; amp & pipe | redir > /tmp/dsl-shellquote-pwned",
    "glob * ? [a-z] ~ ~root",
    "!bang #hash %pct",
    "back\\slash \\' \\\\",
    "--include",
    "-n",
    "\xc3\xbcn\xc3\xaf" "c\xc3\xb8" "d\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
    "\xff\xfe invalid utf-8",
};

TEST(shell_quote_should_round_trip_each_nasty_string_as_one_word_through_sh)
{
    unlink("/tmp/dsl-shellquote-pwned");
    for (size_t i = 0; i < sizeof(nasty) / sizeof(nasty[0]); i++) {
        char *q = dsl_shell_quote(nasty[i]);
        size_t len;
        char *out = sh_words(q, &len);
        ASSERT(len >= 2 && memcmp(out, "1|", 2) == 0);
        ASSERT_EQ(len, 2 + strlen(nasty[i]) + 1);
        ASSERT(memcmp(out + 2, nasty[i], strlen(nasty[i]) + 1) == 0);
        free(out);
        free(q);
    }
    struct stat st;
    ASSERT(stat("/tmp/dsl-shellquote-pwned", &st) < 0);
}

TEST(shell_quote_should_round_trip_every_byte_value_and_adjacent_words)
{
    char all[256];
    for (int i = 1; i < 256; i++)
        all[i - 1] = (char)i;
    all[255] = '\0';
    struct dsl_dynbuf words;
    dsl_dynbuf_init(&words, 1 << 20);
    size_t n = sizeof(nasty) / sizeof(nasty[0]);
    char *q = dsl_shell_quote(all);
    ASSERT_OK(dsl_dynbuf_addstr(&words, q));
    free(q);
    for (size_t i = 0; i < n; i++) {
        q = dsl_shell_quote(nasty[i]);
        ASSERT_OK(dsl_dynbuf_addf(&words, " %s", q));
        free(q);
    }
    size_t len;
    char *out = sh_words(dsl_dynbuf_str(&words), &len);
    char want[16];
    snprintf(want, sizeof(want), "%zu|", n + 1);
    ASSERT(strncmp(out, want, strlen(want)) == 0);
    size_t off = strlen(want);
    ASSERT_STR_EQ(out + off, all);
    off += strlen(all) + 1;
    assert_nul_words(out + off, len - off, nasty, n);
    free(out);
    dsl_dynbuf_release(&words);
}

TEST_MAIN()
