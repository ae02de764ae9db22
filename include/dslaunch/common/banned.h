/*
 * Functions that are too easy to misuse (after git's banned.h). Included last by
 * every .c file of the project; use the checked replacements named here instead.
 */
#ifndef DSLAUNCH_BANNED_H
#define DSLAUNCH_BANNED_H

#define BANNED(func) sorry_##func##_is_a_banned_function

#undef strcpy
#define strcpy(x, y) BANNED(strcpy)  /* use memcpy with a known length or dsl_xstrdup */
#undef strcat
#define strcat(x, y) BANNED(strcat)  /* use struct dsl_dynbuf */
#undef sprintf
#define sprintf(...) BANNED(sprintf) /* use snprintf or dsl_xasprintf */
#undef vsprintf
#define vsprintf(...) BANNED(vsprintf)
#undef atoi
#define atoi(x) BANNED(atoi)         /* use dsl_parse_int */
#undef atol
#define atol(x) BANNED(atol)         /* use dsl_parse_long */
#undef gets
#define gets(x) BANNED(gets)

#endif
