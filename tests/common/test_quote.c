/* Quoting user text for messages (common/quote.c), and the messages that use it. */
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/quote.h"
#include "test.h"

static const char *q(const char *s, size_t cap)
{
    static char buf[512];
    dsl_quote_for_humans(buf, cap, s, strlen(s));
    return buf;
}

TEST(quote_should_escape_control_characters_c_style)
{
    ASSERT_STR_EQ(q("plain text/path-1.txt", 64), "plain text/path-1.txt");
    ASSERT_STR_EQ(q("a\x1b[31mred\x1b[0m", 64), "a\\x1b[31mred\\x1b[0m");
    ASSERT_STR_EQ(q("line\nforged: ok\r\tx", 64), "line\\nforged: ok\\r\\tx");
    ASSERT_STR_EQ(q("\x01\x7f\x08", 64), "\\x01\\x7f\\x08");
}

TEST(quote_should_keep_utf8_and_escape_invalid_bytes_and_hidden_controls)
{
    ASSERT_STR_EQ(q("h\xc3\xb6st-\xe2\x82\xac", 64), "h\xc3\xb6st-\xe2\x82\xac");
    /* a lone continuation byte, a truncated sequence, an overlong '/', a surrogate */
    ASSERT_STR_EQ(q("\x80", 64), "\\x80");
    ASSERT_STR_EQ(q("a\xe2\x82", 64), "a\\xe2\\x82");
    ASSERT_STR_EQ(q("\xc0\xaf", 64), "\\xc0\\xaf");
    ASSERT_STR_EQ(q("\xed\xa0\x80", 64), "\\xed\\xa0\\x80");
    /* C1 CSI and a right-to-left override are shown, not obeyed */
    ASSERT_STR_EQ(q("\xc2\x9b" "2J", 64), "\\u009b2J");
    ASSERT_STR_EQ(q("abc\xe2\x80\xae" "txt", 64), "abc\\u202etxt");
}

TEST(quote_should_cut_whole_escapes_and_mark_the_cut)
{
    /* "a\x1b..." would need 8 bytes with its NUL; cap 7 cuts before the escape */
    ASSERT_STR_EQ(q("a\x1b" "bcdef", 7), "a...");
    ASSERT_STR_EQ(q("abc", 4), "abc");
    ASSERT_STR_EQ(q("abcd", 4), "...");
    char big[600];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    const char *r = q(big, 512);
    ASSERT_EQ(strlen(r), 511);
    ASSERT(strcmp(r + 508, "...") == 0);
    /* a multi-byte character is never split */
    ASSERT_STR_EQ(q("ab\xe2\x82\xac" "cd", 7), "ab...");
    ASSERT_STR_EQ(q("ab\xe2\x82\xac", 7), "ab\xe2\x82\xac");
}

TEST(quote_should_never_emit_a_control_byte_for_any_input)
{
    uint64_t st = 7;
    for (int round = 0; round < 2000; round++) {
        char in[64], out[96];
        size_t n = (size_t)(dsl_test_rng(&st) % sizeof(in));
        for (size_t i = 0; i < n; i++)
            in[i] = (char)(dsl_test_rng(&st) & 0xff);
        size_t len = dsl_quote_for_humans(out, sizeof(out), in, n);
        ASSERT_EQ(len, strlen(out));
        for (size_t i = 0; i < len; i++) {
            unsigned char c = (unsigned char)out[i];
            ASSERT(c >= 0x20 && c != 0x7f);
        }
    }
}

TEST(seterr_should_escape_whatever_the_message_quotes)
{
    char err[DSL_ERR_LEN];
    ASSERT_EQ(dsl_seterr(err, DSL_EUSAGE, "bad host '%s'", "w\x1b]0;pwned\x07"), DSL_EUSAGE);
    ASSERT_STR_EQ(err, "bad host 'w\\x1b]0;pwned\\x07'");
    /* err may be one of its own arguments */
    dsl_seterr(err, DSL_EUSAGE, "outer: %s (%s)", err, "x\ny");
    ASSERT_STR_EQ(err, "outer: bad host 'w\\x1b]0;pwned\\x07' (x\\ny)");
}

TEST(excerpt_should_escape_and_shorten)
{
    char ex[DSL_EXCERPT_LEN];
    dsl_excerpt(ex, sizeof(ex), "w\tx\x1b", 4);
    ASSERT_STR_EQ(ex, "w\\tx\\x1b");
    char big[200];
    memset(big, 'y', sizeof(big));
    dsl_excerpt(ex, sizeof(ex), big, sizeof(big));
    ASSERT_EQ(strlen(ex), DSL_EXCERPT_LEN - 1);
    ASSERT(strcmp(ex + DSL_EXCERPT_LEN - 4, "...") == 0);
}

TEST_MAIN()
