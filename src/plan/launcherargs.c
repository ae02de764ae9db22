/* --launcher_args split into words without a shell (launcherargs.h). */
#include <string.h>

#include "dslaunch/plan/launcherargs.h"
#include "dslaunch/common/banned.h"

void dsl_launcher_args_split(struct dsl_strvec *out, const char *args)
{
    for (const char *s = args ? args : ""; *s;) {
        s += strspn(s, " \t\n\r\v\f");
        size_t w = strcspn(s, " \t\n\r\v\f");
        if (w)
            dsl_strvec_pushf(out, "%.*s", (int)w, s);
        s += w;
    }
}
