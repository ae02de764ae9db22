/*
 * dsl_ssh_fanout: open the ssh transport to many hosts at once from one poll loop and
 * time it, without the launcher on top (a benchmark helper, not a test).
 *
 *   dsl_ssh_fanout SSH_CONFIG COPIES COMMAND HOST...
 *
 * Opens COPIES connections to every HOST concurrently, runs COMMAND (one word, e.g.
 * /bin/true) on each, reads every channel to EOF and prints the time until all were
 * OPEN and until all had ended, and the failures. Exit 0 only if every one succeeded.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/parse.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

int main(int argc, char **argv)
{
    int copies;
    if (argc < 5 || dsl_parse_int(argv[2], 1, 1000, &copies) < 0) {
        fprintf(stderr, "usage: dsl_ssh_fanout SSH_CONFIG COPIES COMMAND HOST...\n");
        return 2;
    }
    int nhosts = argc - 4, n = nhosts * copies;
    struct dsl_transport_opts o = {.ssh_config = argv[1], .connect_timeout = 60,
                                   .keepalive = 15};
    char *cmd[] = {argv[3], NULL};
    struct dsl_conn *c = dsl_xcalloc((size_t)n, sizeof(*c));
    struct pollfd *pf = dsl_xcalloc((size_t)n, sizeof(*pf));
    int *done = dsl_xcalloc((size_t)n, sizeof(int));
    double t0 = dsl_now(), t_open = 0;
    for (int i = 0; i < n; i++) {
        c[i].ops = &dsl_transport_ssh;
        c[i].host = dsl_xstrdup(argv[4 + i % nhosts]);
        c[i].ops->open(&c[i], &o, cmd);
    }
    int left = n, failed = 0;
    char buf[4096];
    while (left > 0) {
        int opening = 0;
        for (int i = 0; i < n; i++) {
            pf[i].fd = done[i] ? -1 : c[i].ops->pollfd(&c[i], &pf[i].events);
            opening += !done[i] && c[i].state != DSL_CONN_OPEN;
        }
        if (!opening && !t_open)
            t_open = dsl_now();
        poll(pf, (nfds_t)n, 100);
        for (int i = 0; i < n; i++) {
            if (done[i])
                continue;
            if (c[i].state != DSL_CONN_OPEN && c[i].state != DSL_CONN_CLOSED)
                c[i].ops->progress(&c[i]);
            if (c[i].state == DSL_CONN_FAILED) {
                fprintf(stderr, "%s: %s\n", c[i].host, c[i].err);
                done[i] = 1;
                failed++;
                left--;
                continue;
            }
            if (c[i].state != DSL_CONN_OPEN)
                continue;
            ssize_t r;
            while ((r = c[i].ops->read(&c[i], buf, sizeof(buf))) > 0)
                ;
            if (r == 0 || (r < 0 && r != -EAGAIN)) {
                done[i] = 1;
                left--;
            }
        }
    }
    double t_end = dsl_now();
    printf("connections=%d open_s=%.3f end_s=%.3f failed=%d\n", n, t_open ? t_open - t0 : 0,
           t_end - t0, failed);
    for (int i = 0; i < n; i++) {
        c[i].ops->close(&c[i]);
        free(c[i].host);
    }
    free(done);
    free(pf);
    free(c);
    return failed ? 1 : 0;
}
