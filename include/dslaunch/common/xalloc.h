/*
 * Small allocations that abort on out-of-memory, so that parser and
 * placement code stays readable. Big buffers (parameters, gradients, collective
 * scratch) must use plain malloc and report failure with their size instead.
 */
#ifndef DSLAUNCH_XALLOC_H
#define DSLAUNCH_XALLOC_H

#include <stddef.h>

void *dsl_xmalloc(size_t n);
void *dsl_xcalloc(size_t nmemb, size_t size);
void *dsl_xrealloc(void *p, size_t n);
/** Reallocate p to hold nmemb elements of size bytes, checking the multiplication. */
void *dsl_xreallocarray(void *p, size_t nmemb, size_t size);
char *dsl_xstrdup(const char *s);
char *dsl_xstrndup(const char *s, size_t n);
/** printf into a new string owned by the caller. */
char *dsl_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/** Grow an array (ptr, nr, alloc) so that ptr[nr] may be written. */
#define DSL_ALLOC_GROW(ptr, nr, alloc)                                         \
    do {                                                                       \
        if ((size_t)(nr) >= (size_t)(alloc)) {                                 \
            (alloc) = (alloc) ? (alloc)*2 : 8;                                 \
            (ptr) = dsl_xreallocarray((ptr), (size_t)(alloc), sizeof(*(ptr))); \
        }                                                                      \
    } while (0)

#endif
