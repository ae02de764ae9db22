/* libFuzzer target: arbitrary bytes as an env file. A parse either fails with an
 * "env file '" message and leaves the env untouched, or sets only valid names. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/plan/envexport.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/strvec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dsl_strvec env;
    char err[DSL_ERR_LEN];
    dsl_strvec_init(&env);
    dsl_env_set(&env, "KEEP", "1");
    if (dsl_envfile_parse(&env, "fuzz", (const char *)data, size, err) < 0) {
        if (env.nr != 1 || strncmp(err, "env file 'fuzz'", 15) != 0)
            abort();
    } else {
        for (size_t i = 0; i < env.nr; i++) {
            const char *kv = env.v[i], *eq = strchr(kv, '=');
            if (!eq || eq == kv || (kv[0] >= '0' && kv[0] <= '9'))
                abort();
            for (const char *p = kv; p < eq; p++)
                if (!(*p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
                      (*p >= '0' && *p <= '9')))
                    abort();
            if (strchr(eq + 1, '\n'))
                abort();
        }
    }
    dsl_strvec_release(&env);
    return 0;
}
