/* The srun command line of the slurm transport (srun.h). */
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/plan/launcherargs.h"
#include "dslaunch/plan/srun.h"
#include "dslaunch/common/banned.h"

int dsl_srun_argv(struct dsl_strvec *out, const char *launcher_args, char *const *hosts,
                  size_t nhosts, char *const *agent_argv, const char *connect,
                  const char *key, char *err)
{
    if (nhosts == 0)
        return dsl_seterr(err, DSL_EUSAGE, "srun: no host to start an agent on");
    struct dsl_dynbuf list;
    dsl_dynbuf_init(&list, 1 << 24);
    for (size_t i = 0; i < nhosts; i++) {
        if (!hosts[i][0] || hosts[i][0] == '-' || strpbrk(hosts[i], ",[] \t\n")) {
            dsl_dynbuf_release(&list);
            return dsl_seterr(err, DSL_EUSAGE, "host name '%.100s' cannot be passed to srun "
                              "--nodelist", hosts[i]);
        }
        if (i)
            dsl_dynbuf_add(&list, ",", 1);
        dsl_dynbuf_add(&list, hosts[i], strlen(hosts[i]));
    }
    const char *srun = getenv("DSLAUNCH_SRUN");
    dsl_strvec_push(out, srun && srun[0] ? srun : "srun");
    dsl_strvec_pushf(out, "--nodes=%zu", nhosts);
    dsl_strvec_pushf(out, "--ntasks=%zu", nhosts);
    dsl_strvec_push(out, "--ntasks-per-node=1");
    dsl_strvec_push(out, "--kill-on-bad-exit=1");
    dsl_strvec_pushf(out, "--nodelist=%s", dsl_dynbuf_str(&list));
    dsl_strvec_push(out, "--job-name=dslaunch");
    /* run from inside a job step (srun --pty bash, a task of another srun): that step
     * holds the job's CPUs, and a step that does not overlap it would wait for them */
    const char *step = getenv("SLURM_STEP_ID");
    long id;
    if (step && dsl_parse_long(step, 0, 0xfffffff0L, &id) == 0)
        dsl_strvec_push(out, "--overlap");
    dsl_launcher_args_split(out, launcher_args);
    for (size_t i = 0; agent_argv[i]; i++)
        dsl_strvec_push(out, agent_argv[i]);
    dsl_strvec_push(out, "--slurm-nodes");
    dsl_strvec_push(out, dsl_dynbuf_str(&list));
    dsl_strvec_push(out, "--connect");
    dsl_strvec_push(out, connect);
    dsl_strvec_push(out, "--launcher-key");
    dsl_strvec_push(out, key);
    dsl_dynbuf_release(&list);
    return 0;
}
