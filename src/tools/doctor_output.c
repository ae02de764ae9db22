/*
 * `dslaunch doctor`'s output: the rows of the report (doctor_report.c) as one table,
 * or with --json as one JSON object that also carries each node's facts and the
 * all-reduce's table. Called once, after every check has run; writes stdout only.
 */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "dslaunch/plan/plan.h"
#include "doctor_impl.h"
#include "dslaunch/common/banned.h"

void dsl_doctor_print_json(struct doctor *d, struct dsl_job *job)
{
    cJSON *o = cJSON_CreateObject();
    int problems = dsl_doctor_report_count(&d->rep, DSL_DOCTOR_FAIL);
    cJSON_AddBoolToObject(o, "ok", problems == 0);
    cJSON_AddNumberToObject(o, "problems", problems);
    cJSON_AddNumberToObject(o, "notes", dsl_doctor_report_count(&d->rep, DSL_DOCTOR_NOTE));
    cJSON_AddStringToObject(o, "version", DSL_VERSION);
    cJSON_AddStringToObject(o, "master_addr", job->plan->master_addr ? job->plan->master_addr : "");
    cJSON_AddNumberToObject(o, "master_port", job->plan->master_port);
    cJSON *nodes = cJSON_AddArrayToObject(o, "nodes");
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "host", n->pn->host);
        cJSON_AddBoolToObject(x, "reachable", n->state != DSL_NODE_FAILED);
        if (n->have_hello) {
            cJSON_AddStringToObject(x, "hostname", n->hello.host);
            cJSON_AddStringToObject(x, "dslaunch", n->hello.version);
            cJSON_AddNumberToObject(x, "cpus", n->hello.cpus);
            cJSON_AddNumberToObject(x, "gpus", n->hello.gpus);
        }
        cJSON_AddNumberToObject(x, "slots", n->pn->nslots);
        if (d->dn && d->dn[i].probed) {
            cJSON_AddBoolToObject(x, "master_reached", d->dn[i].reached);
            cJSON_AddStringToObject(x, "iface", d->dn[i].iface);
            cJSON_AddStringToObject(x, "src", d->dn[i].src);
        }
        const struct dsl_facts *f = dsl_doctor_facts_of(n);
        if (f) {
            cJSON_AddStringToObject(x, "kernel", f->kernel);
            cJSON_AddStringToObject(x, "glibc", f->glibc);
            cJSON_AddStringToObject(x, "cuda_driver", f->cuda_driver);
            cJSON_AddStringToObject(x, "cuda_runtime", f->cuda_runtime);
            cJSON_AddStringToObject(x, "nccl", f->nccl);
            if (f->cvd_set)
                cJSON_AddStringToObject(x, "cuda_visible_devices", f->cvd);
            cJSON *g = cJSON_AddArrayToObject(x, "gpu_free_mib");
            for (int k = 0; k < f->ngpu; k++)
                cJSON_AddItemToArray(g, cJSON_CreateNumber(f->gpu_free_mib[k]));
            cJSON *ib = cJSON_AddArrayToObject(x, "infiniband");
            for (size_t k = 0; k < f->ib.nr; k++)
                cJSON_AddItemToArray(ib, cJSON_CreateString(f->ib.v[k]));
            cJSON_AddNumberToObject(x, "disk_free", f->disk_free);
            cJSON_AddNumberToObject(x, "clock_offset", d->dn[i].offset);
            cJSON_AddNumberToObject(x, "clock_bound", d->dn[i].bound);
        }
        cJSON_AddItemToArray(nodes, x);
    }
    cJSON *checks = cJSON_AddArrayToObject(o, "checks");
    for (int i = 0; i < d->rep.nrows; i++) {
        const struct dsl_doctor_row *r = &d->rep.rows[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "host", r->host);
        cJSON_AddStringToObject(x, "check", r->check);
        cJSON_AddStringToObject(x, "status", r->status == DSL_DOCTOR_OK     ? "ok"
                                             : r->status == DSL_DOCTOR_NOTE ? "note"
                                                                            : "fail");
        cJSON_AddStringToObject(x, "value", r->value);
        if (r->remedy)
            cJSON_AddStringToObject(x, "remedy", r->remedy);
        cJSON_AddItemToArray(checks, x);
    }
    if (d->bench.ran) {
        cJSON *b = cJSON_AddObjectToObject(o, "allreduce");
        cJSON_AddBoolToObject(b, "ok", d->bench.ok);
        cJSON_AddStringToObject(b, "backend", d->bench.backend);
        cJSON_AddNumberToObject(b, "ranks", job->pl->world_size);
        cJSON_AddNumberToObject(b, "busbw_gbps", d->bench.busbw);
        cJSON *t = cJSON_AddArrayToObject(b, "table");
        for (size_t k = 0; k < d->bench.table.nr; k++)
            cJSON_AddItemToArray(t, cJSON_CreateString(d->bench.table.v[k]));
    }
    char *s = cJSON_Print(o);
    fputs(s, stdout);
    fputc('\n', stdout);
    cJSON_free(s);
    cJSON_Delete(o);
}

void dsl_doctor_print_table(struct doctor *d, struct dsl_job *job)
{
    printf("dslaunch doctor %s: %d node(s), %d rank(s), MASTER_ADDR=%s MASTER_PORT=%d\n",
           DSL_VERSION, job->nnodes, job->pl->world_size,
           job->plan->master_addr ? job->plan->master_addr : "?", job->plan->master_port);
    dsl_doctor_report_print(&d->rep, stdout);
    if (d->bench.ran && d->bench.table.nr) {
        printf("all-reduce (%s):\n", d->bench.backend);
        for (size_t k = 0; k < d->bench.table.nr; k++)
            printf("  %s\n", d->bench.table.v[k]);
    }
    int problems = dsl_doctor_report_count(&d->rep, DSL_DOCTOR_FAIL);
    int notes = dsl_doctor_report_count(&d->rep, DSL_DOCTOR_NOTE);
    if (problems)
        printf("doctor: %d problem(s), %d note(s)\n", problems, notes);
    else
        printf("doctor: all checks passed on %d node(s)%s\n", job->nnodes,
               notes ? " (see the notes)" : "");
    fflush(stdout);
}
