/*
 * Which stacks wait inside a collective.
 *
 * Theory of operation. The launcher asks the node agents for native stacks of every
 * rank before it writes a job-level hang verdict (job_watch.c's probes). A rank that
 * waits for its peers shows it in one of its threads: the frames of the communication
 * library's wait are there, under a futex, poll or busy wait at the top. Idle library
 * threads (a ProcessGroupGloo worker waiting for work, NCCL's watchdog, gloo's event
 * loop) are there in every rank, busy or not, so only the frames of a wait that a
 * collective or the rendezvous is in count; they are matched by name, one frame line
 * at a time (eu-stack's "#3 0x... name", gdb's "#3 0x... in name (...)").
 * Names come from the libraries' exported symbols (eu-stack and gdb both demangle
 * them), so they survive builds without debug information; a capture with no frame
 * at all (no stack tool, a process gone) says nothing.
 */
#include <stddef.h>
#include <string.h>

#include "hang_stack.h"
#include "dslaunch/common/banned.h"

struct pattern {
    const char *frame; /* a substring of one frame line */
    const char *what;
};

/* in order: the first match within a thread names the library */
static const struct pattern waits[] = {
    {"gloo::transport::tcp::UnboundBuffer::wait", "a gloo collective"},
    {"gloo::transport::tcp::Pair::waitUntil", "a gloo collective"},
    {"ProcessGroupGloo::AsyncWork::wait", "a gloo collective"},
    {"ProcessGroupGloo::SendWork::wait", "a gloo collective"},
    {"ProcessGroupGloo::RecvWork::wait", "a gloo collective"},
    {"WorkNCCL::wait", "an NCCL collective"},
    {"WorkNCCL::synchronize", "an NCCL collective"},
    {"ncclCommInitRank", "an NCCL collective"},
    {"c10d::Reducer::finalize_backward", "a torch.distributed collective"},
    {"c10d::Work::wait", "a torch.distributed collective"},
    {"c10d::ProcessGroup::Work::wait", "a torch.distributed collective"},
    {"c10d::TCPStore::", "the torch.distributed rendezvous (TCPStore)"},
    {"c10d::detail::TCPClient::", "the torch.distributed rendezvous (TCPStore)"},
    {"c10d::PrefixStore::wait", "the torch.distributed rendezvous (TCPStore)"},
    {"dsl_comm_", "a dstrain collective"},
    {"ompi_request_default_wait", "an MPI call"},
    {"PMPI_", "an MPI call"},
};

/* A frame line: "#12 0x..." */
static int frame_line(const char *line)
{
    return line[0] == '#' && line[1] >= '0' && line[1] <= '9';
}

static const char *match(const char *line, size_t len)
{
    for (size_t k = 0; k < sizeof(waits) / sizeof(waits[0]); k++) {
        size_t m = strlen(waits[k].frame);
        for (size_t i = 0; i + m <= len; i++)
            if (!memcmp(line + i, waits[k].frame, m))
                return waits[k].what;
    }
    return NULL;
}

enum dsl_hang_wait dsl_hang_stack_wait(const char *text, const char **what)
{
    if (what)
        *what = NULL;
    if (!text)
        return DSL_HANG_WAIT_UNKNOWN;
    int frames = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (frame_line(p)) {
            frames++;
            const char *w = match(p, len);
            if (w) {
                if (what)
                    *what = w;
                return DSL_HANG_WAIT_IN;
            }
        }
        p = nl ? nl + 1 : p + len;
    }
    return frames ? DSL_HANG_WAIT_NO : DSL_HANG_WAIT_UNKNOWN;
}

int dsl_hang_wait_spins(const char *what)
{
    return what && strstr(what, "NCCL") != NULL;
}
