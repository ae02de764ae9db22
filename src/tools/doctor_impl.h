/*
 * The state of one `dslaunch doctor` run, shared by doctor.c (the checks) and
 * doctor_output.c (the table and the JSON object).
 */
#ifndef DSLAUNCH_DOCTOR_IMPL_H
#define DSLAUNCH_DOCTOR_IMPL_H

#include "dslaunch/common/strvec.h"
#include "dslaunch/job/job.h"
#include "dslaunch/remote/facts.h"
#include "dslaunch/tools/doctor.h"

struct doc_node {
    int probed;         /* the master probe answered for this node */
    int reached;        /* node 0: holds the master port; others: reached node 0 */
    char *iface, *src;  /* route to the master (owned) */
    int asked, answered;
    double t0, t3;      /* diag sent / answer seen, launcher's CLOCK_REALTIME */
    double offset, bound;
};

struct doctor {
    int json, allreduce;
    struct dsl_strvec fwd;   /* the launcher options given, for the all-reduce job */
    struct dsl_job *job;
    struct doc_node *dn;
    int connect_code, probe_code, probe_ran, interrupted;
    struct dsl_doctor_bench bench;
    struct dsl_doctor_report rep;
};

/** The facts a node's diag probe answered, or NULL (node failed, no answer). */
static inline const struct dsl_facts *dsl_doctor_facts_of(const struct dsl_job_node *n)
{
    return n->state != DSL_NODE_FAILED && n->have_probed && n->probed.facts ? n->probed.facts
                                                                            : NULL;
}

/** The report as one JSON object on stdout (--json). */
void dsl_doctor_print_json(struct doctor *d, struct dsl_job *job);
/** The report as a table on stdout, with the all-reduce's rows and a verdict line. */
void dsl_doctor_print_table(struct doctor *d, struct dsl_job *job);

#endif
