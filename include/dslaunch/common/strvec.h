/*
 * A growable, NULL-terminated vector of owned strings: argv and env lists
 * (after git's strvec). `v` is never NULL, so a fresh strvec can be
 * passed to execve() directly. An env entry "K=V" sets a variable; a bare "K" unsets it.
 */
#ifndef DSLAUNCH_STRVEC_H
#define DSLAUNCH_STRVEC_H

#include <stddef.h>

struct dsl_strvec {
    char **v;    /* NULL-terminated; owned by the strvec */
    size_t nr;
    size_t alloc;
};

void dsl_strvec_init(struct dsl_strvec *sv);
/** Append a copy of s. Returns the stored copy (owned by the strvec). */
const char *dsl_strvec_push(struct dsl_strvec *sv, const char *s);
const char *dsl_strvec_pushf(struct dsl_strvec *sv, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/** Append the entries of a NULL-terminated array. */
void dsl_strvec_pushv(struct dsl_strvec *sv, const char *const *items);
/** Take ownership of s (allocated with malloc) and append it. */
void dsl_strvec_push_nodup(struct dsl_strvec *sv, char *s);
void dsl_strvec_release(struct dsl_strvec *sv);
void dsl_strvec_clear(struct dsl_strvec *sv);

/*
 * Env helpers: an env strvec holds "K=V" entries with unique keys.
 * dsl_env_set replaces an existing K or appends; dsl_env_get returns the value part
 * (pointer into the strvec) or NULL.
 */
void dsl_env_set(struct dsl_strvec *env, const char *key, const char *value);
const char *dsl_env_get(const struct dsl_strvec *env, const char *key);
/** Remove key from env. Returns 1 if it was present. */
int dsl_env_unset(struct dsl_strvec *env, const char *key);
/**
 * The value of the first "K=V" entry whose K is the first keylen bytes of key, in a
 * NULL-terminated array (environ, a strvec's v; NULL reads as empty), or NULL. Allocates
 * nothing: a forked child may call it.
 */
const char *dsl_env_lookup(char *const *env, const char *key, size_t keylen);

#endif
