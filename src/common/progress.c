/*
 * Progress heartbeats: the record's writer side (a rank maps its file once) and its
 * reader side (the node agent looks at the file every progress tick).
 *
 * Theory of operation. The writer maps the first page of the file MAP_SHARED and from
 * then on only stores into it (progress.h's inline functions); nothing here runs per
 * report. The reader never maps: a text writer may truncate the file at any moment,
 * and touching a mapped page past the end of a truncated file is SIGBUS. It preads
 * the first DSL_PROGRESS_FILE_SIZE bytes twice and accepts the content when both reads
 * agree (at most four tries), so a copy torn by a concurrent store is never believed;
 * when the writer never holds still, the last read is used, which at worst shows a
 * collective's number with the previous one's in/out flag for one tick. An empty read
 * (a text writer between truncating and writing) is reported as EMPTY, which the
 * agent takes as "no news", not as a change.
 */
#define _GNU_SOURCE /* O_CLOEXEC, O_NOFOLLOW with _POSIX_C_SOURCE */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dslaunch/common/envnames.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/progress.h"
#include "dslaunch/common/banned.h"

/* ---- writing ---- */

int dsl_progress_attach(const char *path, struct dsl_progress_rec **out, char *err)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return dsl_seterr(err, -errno, "progress file '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        int e = errno ? -errno : -EINVAL;
        close(fd);
        return dsl_seterr(err, e, "progress file '%s': not a regular file", path);
    }
    if ((size_t)st.st_size < sizeof(struct dsl_progress_rec) &&
        ftruncate(fd, (off_t)sizeof(struct dsl_progress_rec)) < 0) {
        int e = -errno;
        close(fd);
        return dsl_seterr(err, e, "progress file '%s': %s", path, strerror(-e));
    }
    void *p = mmap(NULL, sizeof(struct dsl_progress_rec), PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, 0);
    int e = p == MAP_FAILED ? -errno : 0;
    close(fd);
    if (e)
        return dsl_seterr(err, e, "progress file '%s': cannot map it: %s", path, strerror(-e));
    struct dsl_progress_rec *rec = p;
    atomic_store_explicit(&rec->version, DSL_PROGRESS_VERSION, memory_order_relaxed);
    atomic_store_explicit(&rec->magic, DSL_PROGRESS_MAGIC, memory_order_release);
    *out = rec;
    return 0;
}

struct dsl_progress_rec *dsl_progress_self(char *err)
{
    static struct dsl_progress_rec *self;
    static int tried;
    if (tried)
        return self;
    tried = 1;
    const char *path = getenv(DSL_ENV_PROGRESS_FILE);
    if (!path || !*path)
        return NULL;
    struct dsl_progress_rec *rec;
    if (dsl_progress_attach(path, &rec, err) == 0)
        self = rec;
    return self;
}

/* ---- reading ---- */

static uint64_t fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* "step 12", "Step: 12", "12": the number, if the line says one */
static int text_step(const char *s, uint64_t *step)
{
    while (*s == ' ' || *s == '\t')
        s++;
    if ((s[0] == 's' || s[0] == 'S') && !strncmp(s + 1, "tep", 3)) {
        s += 4;
        while (*s == ' ' || *s == ':' || *s == '=' || *s == '\t')
            s++;
    }
    if (*s < '0' || *s > '9')
        return 0;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (UINT64_MAX - 9) / 10)
            return 0;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *step = v;
    return 1;
}

void dsl_progress_parse(const void *buf, size_t len, struct dsl_progress_view *v)
{
    const unsigned char *b = buf;
    memset(v, 0, sizeof(*v));
    size_t used = len;
    while (used && b[used - 1] == 0)
        used--; /* the zeros the agent created the file with */
    if (!used)
        return;
    uint32_t magic, version;
    if (len >= sizeof(struct dsl_progress_rec)) {
        memcpy(&magic, b, 4);
        memcpy(&version, b + 4, 4);
        if (magic == DSL_PROGRESS_MAGIC && version == DSL_PROGRESS_VERSION) {
            v->form = DSL_PROGRESS_RECORD;
            v->has_step = 1;
            v->step = get64(b + offsetof(struct dsl_progress_rec, step));
            uint64_t c = get64(b + offsetof(struct dsl_progress_rec, coll));
            v->coll_seq = c >> 8;
            v->coll_kind = (int)((c >> 1) & 0x7f);
            v->in_coll = (int)(c & 1);
            v->beat = get64(b + offsetof(struct dsl_progress_rec, beat));
            uint64_t ph = get64(b + offsetof(struct dsl_progress_rec, phase));
            v->phase = ph <= DSL_PROGRESS_PHASE_MAX ? (int)ph : 0;
            v->hash = fnv1a(b, sizeof(struct dsl_progress_rec));
            return;
        }
    }
    v->form = DSL_PROGRESS_TEXT;
    v->hash = fnv1a(b, used);
    /* the last non-empty line, printable bytes only */
    size_t end = used;
    while (end && (b[end - 1] == '\n' || b[end - 1] == '\r' || b[end - 1] == ' '))
        end--;
    size_t start = end;
    while (start && b[start - 1] != '\n' && b[start - 1] != '\r')
        start--;
    size_t n = 0;
    for (size_t i = start; i < end && n + 1 < sizeof(v->text); i++)
        v->text[n++] = b[i] >= 0x20 && b[i] < 0x7f ? (char)b[i] : '?';
    v->text[n] = '\0';
    v->has_step = text_step(v->text, &v->step);
}

int dsl_progress_read_file(const char *path, struct dsl_progress_view *v)
{
    unsigned char a[DSL_PROGRESS_FILE_SIZE], b[DSL_PROGRESS_FILE_SIZE];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    ssize_t na = pread(fd, a, sizeof(a), 0), nb = -1;
    for (int tries = 0; na >= 0 && tries < 4; tries++) {
        nb = pread(fd, b, sizeof(b), 0);
        if (nb == na && !memcmp(a, b, (size_t)na))
            break;
        if (nb < 0)
            break;
        memcpy(a, b, (size_t)nb);
        na = nb;
    }
    int e = na < 0 || nb < 0 ? -errno : 0;
    close(fd);
    if (e)
        return e;
    dsl_progress_parse(a, (size_t)na, v);
    return 0;
}

const char *dsl_progress_coll_name(int kind)
{
    switch (kind) {
    case DSL_PROGRESS_ALLREDUCE: return "allreduce";
    case DSL_PROGRESS_REDUCE_SCATTER: return "reduce_scatter";
    case DSL_PROGRESS_ALLGATHER: return "allgather";
    case DSL_PROGRESS_BROADCAST: return "broadcast";
    case DSL_PROGRESS_BARRIER: return "barrier";
    default: return "collective";
    }
}

const char *dsl_progress_phase_name(int phase)
{
    switch (phase) {
    case DSL_PROGRESS_PHASE_SAVING: return "saving a checkpoint";
    case DSL_PROGRESS_PHASE_LOADING: return "loading a checkpoint";
    default: return NULL;
    }
}
