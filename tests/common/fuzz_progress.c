/* libFuzzer target: arbitrary bytes as a rank's progress file, which the node agent reads
 * every progress tick (any program may write it: the binary record or text). The bytes
 * are decoded directly and, written to a file, through dsl_progress_read_file, which
 * must see the same as a decode of the file's first DSL_PROGRESS_FILE_SIZE bytes. A view
 * is empty only for nothing but zeros, a record only for a whole record, its text
 * printable and terminated, its phase one the launcher can name. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/progress.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];

static void remove_file(void)
{
    unlink(path);
}

static void check(const struct dsl_progress_view *v, const uint8_t *data, size_t size)
{
    size_t nonzero = 0;
    for (size_t i = 0; i < size; i++)
        nonzero += data[i] != 0;
    if ((v->form == DSL_PROGRESS_EMPTY) != (nonzero == 0))
        abort();
    if (v->form == DSL_PROGRESS_RECORD &&
        (size < sizeof(struct dsl_progress_rec) || !v->has_step))
        abort();
    if (v->phase < 0 || v->phase > DSL_PROGRESS_PHASE_MAX || v->coll_kind < 0 ||
        v->coll_kind > 127 || (v->in_coll != 0 && v->in_coll != 1))
        abort();
    if (!memchr(v->text, '\0', sizeof(v->text)))
        abort();
    for (const char *p = v->text; *p; p++)
        if (*p < 0x20 || *p >= 0x7f)
            abort();
    if (v->form != DSL_PROGRESS_TEXT && v->text[0])
        abort();
    if (!dsl_progress_coll_name(v->coll_kind))
        abort();
    (void)dsl_progress_phase_name(v->phase);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0]) {
        snprintf(path, sizeof(path), "/tmp/dsl_fuzz_progress.%ld", (long)getpid());
        atexit(remove_file);
    }
    struct dsl_progress_view v, f, head;
    dsl_progress_parse(data, size, &v);
    check(&v, data, size);

    FILE *fp = fopen(path, "wb");
    if (!fp || (size && fwrite(data, 1, size, fp) != size) || fclose(fp) != 0)
        abort();
    if (dsl_progress_read_file(path, &f) != 0)
        abort();
    size_t n = size < DSL_PROGRESS_FILE_SIZE ? size : DSL_PROGRESS_FILE_SIZE;
    dsl_progress_parse(data, n, &head);
    if (memcmp(&f, &head, sizeof(f)) != 0)
        abort(); /* the view is memset first, so padding compares equal too */
    return 0;
}
