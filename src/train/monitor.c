/*
 * DeepSpeed's monitors for dstrain: `csv_monitor` and `tensorboard` in ds_config.json.
 *
 * Theory of operation. Rank 0 alone writes, from the training loop's thread, after each
 * step (and evaluation); nothing runs concurrently and nothing here blocks on another
 * rank. Both write into <output_path>/<job_name>/ (DeepSpeed's layout; output_path ""
 * is the working directory), made when the monitor opens, before the first step.
 *
 *   csv_monitor: one file per scalar, its name the scalar's with '/' and ' ' as '_'
 *     (Train/Samples/train_loss -> Train_Samples_train_loss.csv), a header row
 *     "step,<last part of the name>" when the file is new, then "step,value" rows,
 *     "\r\n"-terminated as Python's csv module writes them. Appended, so a resumed run
 *     continues the same files.
 *   tensorboard: one event file, events.out.tfevents.<seconds>.<host> (as TensorBoard's
 *     writers name theirs), of TFRecords: an 8-byte little-endian length, the masked
 *     CRC-32C of those 8 bytes, the data, the masked CRC-32C of the data. Each record is
 *     an Event protocol buffer: the first holds file_version "brain.Event:2", the others
 *     a wall_time, a step and a Summary with one Value (tag, simple_value). The
 *     protocol buffer encoding is written by hand (the few fields above), so nothing
 *     new is linked.
 *
 * As in DeepSpeed the x of every scalar is the samples trained so far (global batch x
 * step), and the scalars are Train/Samples/train_loss, Train/Samples/lr and, with
 * fp16, Train/Samples/loss_scale; dstrain adds Eval/Samples/test_loss at evaluations.
 * A write that fails is an error with the file's name: the run stops rather than
 * losing its record without a word.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "monitor.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

/* CRC-32C (Castagnoli, reflected 0x82F63B78), bit by bit: records are small */
uint32_t dsl_monitor_crc32c(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= b[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

uint32_t dsl_monitor_masked_crc(const void *p, size_t n)
{
    uint32_t c = dsl_monitor_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

static char *monitor_dir(const char *output_path, const char *job_name)
{
    const char *job = job_name && *job_name ? job_name : "DeepSpeedJobName";
    if (!output_path || !*output_path)
        return dsl_xstrdup(job);
    size_t n = strlen(output_path);
    return dsl_xasprintf("%s%s%s", output_path, output_path[n - 1] == '/' ? "" : "/", job);
}

static int make_dir(const char *dir, const char *what, char *err)
{
    int r = dsl_dir_make_all(dir);
    if (r < 0)
        return dsl_seterr(err, r, "%s: cannot make the directory '%s': %s", what, dir,
                          strerror(-r));
    return 0;
}

/* ---- protocol buffers, the few fields of Event ------------------------------------ */

static size_t put_varint(unsigned char *o, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        o[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    o[n++] = (unsigned char)v;
    return n;
}

static size_t put_fixed(unsigned char *o, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        o[i] = (unsigned char)(v >> (8 * i));
    return (size_t)bytes;
}

static int write_record(struct dsl_monitor *m, const unsigned char *d, size_t n, char *err)
{
    unsigned char head[12], tail[4];
    put_fixed(head, n, 8);
    put_fixed(head + 8, dsl_monitor_masked_crc(head, 8), 4);
    put_fixed(tail, dsl_monitor_masked_crc(d, n), 4);
    if (fwrite(head, 1, sizeof(head), m->tb) != sizeof(head) || fwrite(d, 1, n, m->tb) != n ||
        fwrite(tail, 1, sizeof(tail), m->tb) != sizeof(tail) || fflush(m->tb) != 0)
        return dsl_seterr(err, errno ? -errno : -EIO, "tensorboard: cannot write '%s': %s",
                          m->tb_path, strerror(errno ? errno : EIO));
    return 0;
}

/* Event{wall_time=1 (double), step=2 (int64), file_version=3 | summary=5} */
static int tb_event(struct dsl_monitor *m, const char *tag, double value, uint64_t step,
                    char *err)
{
    unsigned char b[512], val[320], sum[330];
    size_t n = 0, tl = tag ? strlen(tag) : 0, vn = 0, sn = 0;
    if (tl > 256)
        tl = 256;
    double wall = (double)time(NULL);
    uint64_t wbits;
    memcpy(&wbits, &wall, sizeof(wbits));
    b[n++] = 0x09; /* wall_time, fixed64 */
    n += put_fixed(b + n, wbits, 8);
    if (!tag) {
        static const char ver[] = "brain.Event:2";
        b[n++] = 0x1A; /* file_version, bytes */
        n += put_varint(b + n, sizeof(ver) - 1);
        memcpy(b + n, ver, sizeof(ver) - 1);
        n += sizeof(ver) - 1;
        return write_record(m, b, n, err);
    }
    b[n++] = 0x10; /* step, varint */
    n += put_varint(b + n, step);
    /* Summary.Value{tag=1 (string), simple_value=2 (float)} */
    float f = (float)value;
    uint32_t fbits;
    memcpy(&fbits, &f, sizeof(fbits));
    val[vn++] = 0x0A;
    vn += put_varint(val + vn, tl);
    memcpy(val + vn, tag, tl);
    vn += tl;
    val[vn++] = 0x15;
    vn += put_fixed(val + vn, fbits, 4);
    /* Summary{value=1 (repeated Value)} */
    sum[sn++] = 0x0A;
    sn += put_varint(sum + sn, vn);
    memcpy(sum + sn, val, vn);
    sn += vn;
    b[n++] = 0x2A; /* summary, message */
    n += put_varint(b + n, sn);
    memcpy(b + n, sum, sn);
    n += sn;
    return write_record(m, b, n, err);
}

/* ---- csv ---------------------------------------------------------------------------- */

static int csv_row(struct dsl_monitor *m, const char *tag, double value, uint64_t step,
                   char *err)
{
    char *name = dsl_xstrdup(tag);
    for (char *p = name; *p; p++)
        if (*p == '/' || *p == ' ')
            *p = '_';
    char *path = dsl_xasprintf("%s/%s.csv", m->csv_dir, name);
    const char *header = strrchr(tag, '/') ? strrchr(tag, '/') + 1 : tag;
    int r = 0;
    FILE *f = fopen(path, "a");
    if (!f) {
        r = dsl_seterr(err, -errno, "csv_monitor: cannot write '%s': %s", path, strerror(errno));
        goto out;
    }
    long at = ftell(f);
    if ((at == 0 && fprintf(f, "step,%s\r\n", header) < 0) ||
        fprintf(f, "%llu,%.9g\r\n", (unsigned long long)step, value) < 0)
        r = dsl_seterr(err, -EIO, "csv_monitor: cannot write '%s'", path);
    if (fclose(f) != 0 && r == 0)
        r = dsl_seterr(err, -errno, "csv_monitor: cannot write '%s': %s", path, strerror(errno));
out:
    free(path);
    free(name);
    return r;
}

int dsl_monitor_open(struct dsl_monitor *m, const struct dsl_cfg_monitor *csv,
                     const struct dsl_cfg_monitor *tb, char *err)
{
    memset(m, 0, sizeof(*m));
    int r;
    if (csv && csv->enabled) {
        m->csv_dir = monitor_dir(csv->output_path, csv->job_name);
        if ((r = make_dir(m->csv_dir, "csv_monitor", err)) < 0)
            goto fail;
    }
    if (tb && tb->enabled) {
        char *dir = monitor_dir(tb->output_path, tb->job_name), host[256] = "localhost";
        r = make_dir(dir, "tensorboard", err);
        if (r == 0) {
            if (gethostname(host, sizeof(host)) != 0)
                snprintf(host, sizeof(host), "localhost");
            host[sizeof(host) - 1] = '\0';
            m->tb_path = dsl_xasprintf("%s/events.out.tfevents.%lld.%s", dir,
                                       (long long)time(NULL), host);
            m->tb = fopen(m->tb_path, "ab");
            if (!m->tb)
                r = dsl_seterr(err, -errno, "tensorboard: cannot write '%s': %s", m->tb_path,
                               strerror(errno));
        }
        free(dir);
        if (r < 0 || (r = tb_event(m, NULL, 0.0, 0, err)) < 0)
            goto fail;
    }
    return 0;
fail:
    dsl_monitor_close(m);
    return r;
}

int dsl_monitor_scalar(struct dsl_monitor *m, const char *tag, double value, uint64_t step,
                       char *err)
{
    int r;
    if (m->csv_dir && (r = csv_row(m, tag, value, step, err)) < 0)
        return r;
    if (m->tb && (r = tb_event(m, tag, value, step, err)) < 0)
        return r;
    return 0;
}

void dsl_monitor_close(struct dsl_monitor *m)
{
    if (m->tb)
        fclose(m->tb);
    free(m->tb_path);
    free(m->csv_dir);
    memset(m, 0, sizeof(*m));
}
