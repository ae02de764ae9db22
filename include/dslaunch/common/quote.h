/*
 * Text from users and peers, made safe to show to people. A hostfile line, an option
 * value, a config key or a path may hold terminal escape sequences, newlines that
 * forge log lines, invalid UTF-8 or bidirectional overrides; quoted into a message as
 * they are, they would be run by the terminal that shows it. dsl_quote_for_humans()
 * writes them C-style instead:
 *
 *   '\n' '\t' '\r'           -> \n \t \r
 *   other C0 bytes, DEL      -> \xNN (ESC is \x1b)
 *   bytes not valid UTF-8    -> \xNN, one per byte
 *   C1 controls (U+0080..9F), bidirectional controls (U+061C, U+200E/F, U+202A..E,
 *   U+2066..9), U+2028/9     -> \uNNNN
 *
 * Everything else (printable ASCII, valid UTF-8) is copied. dsl_seterr() and the log
 * functions pass every message through it, so a message can never carry a control
 * character whatever it quotes; parsers call it (or dsl_excerpt()) where they cut an
 * excerpt out of their input.
 */
#ifndef DSLAUNCH_COMMON_QUOTE_H
#define DSLAUNCH_COMMON_QUOTE_H

#include <stddef.h>

/**
 * Write s[0..n) escaped as above into dst (cap bytes, cap >= 4), always NUL-terminated.
 * When the escaped text does not fit, as much as fits is written, never cutting an
 * escape or a UTF-8 character, followed by "...". Returns the length of dst.
 */
size_t dsl_quote_for_humans(char *dst, size_t cap, const char *s, size_t n);

#endif
