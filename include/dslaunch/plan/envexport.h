/*
 * The exported environment: what every worker gets beyond the per-rank variables.
 *
 * From the launcher's environment: every variable whose name starts with NCCL_,
 * PYTHON, UCX_, OMP_, MV2_, GLOO_, and CUDA_ except CUDA_VISIBLE_DEVICES. Then the
 * KEY=VALUE lines of the env files ~/.deepspeed_env, ~/.dslaunch_env, ./.deepspeed_env,
 * ./.dslaunch_env (later files override earlier ones; comments, blank lines and values
 * with spaces allowed; a malformed line is an error "path:line: ..."). Then --export VAR
 * (value from the launcher's environment) and --export VAR=VALUE. Nothing else.
 */
#ifndef DSLAUNCH_ENVEXPORT_H
#define DSLAUNCH_ENVEXPORT_H

#include <stddef.h>

struct dsl_strvec;

/** 1 if an environment variable of this name is exported by prefix. */
int dsl_env_name_exported(const char *name);

/**
 * Parse env-file text into env (dsl_env_set for each KEY=VALUE, in file order). path is
 * used in messages (NULL reads as "-"). Lines: "KEY=VALUE", optional "export " prefix,
 * '#' comment lines, blank lines; leading blanks and trailing blanks/CR are dropped;
 * a value may be wrapped in matching single or double quotes, which are removed (their
 * contents are kept verbatim: no escapes, no expansion); '#' after a value is part of
 * the value. KEY must be [A-Za-z_][A-Za-z0-9_]*. On a malformed line returns
 * DSL_ECONFIG with err = "env file 'PATH':LINE: what 'line'" and env unchanged.
 */
int dsl_envfile_parse(struct dsl_strvec *env, const char *path, const char *text, size_t len,
                      char *err);
/**
 * Read (at most 1 MiB) and parse path; a missing file is not an error (returns 0, adds
 * nothing). Other I/O errors return -errno with "env file 'PATH': reason".
 */
int dsl_envfile_load(struct dsl_strvec *env, const char *path, char *err);

/**
 * Build the full export set into out (an initialised env strvec; entries are set with
 * dsl_env_set, so existing keys are replaced): prefixes from environ_ (NULL-terminated
 * "K=V" array, may be NULL), env files from home and cwd (either may be NULL or "" to
 * skip), then exports (each "VAR" or "VAR=VALUE"; a "VAR" that is not set in environ_
 * or a bad name is DSL_EUSAGE). On error out is unchanged and err holds the message.
 */
int dsl_envexport_build(struct dsl_strvec *out, char *const *environ_, const char *home,
                        const char *cwd, char *const *exports, size_t nexports, char *err);

#endif
