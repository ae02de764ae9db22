/*
 * Core binding of a node's ranks: parse core lists, read the NUMA topology, split the
 * cores between the local ranks (cpubind.h says how). The agent applies the result in
 * each rank's child before its exec (common/spawn.c), so everything the rank starts
 * inherits it.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/cpubind.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

static int read_num(const char **p, int *v)
{
    const char *s = *p;
    long n = 0;
    if (*s < '0' || *s > '9')
        return -1;
    while (*s >= '0' && *s <= '9') {
        n = n * 10 + (*s++ - '0');
        if (n >= DSL_CPUBIND_MAX)
            return -1;
    }
    *v = (int)n;
    *p = s;
    return 0;
}

int dsl_cpubind_parse(const char *list, int *out, size_t cap, char *err)
{
    unsigned char *seen = dsl_xcalloc(DSL_CPUBIND_MAX, 1);
    const char *p = list;
    int r = 0;
    if (!*p)
        r = dsl_seterr(err, DSL_EUSAGE, "empty core list");
    while (r == 0 && *p) {
        const char *item = p;
        int lo, hi;
        if (read_num(&p, &lo) < 0) {
            r = -1;
        } else if (*p == '-') {
            p++;
            if (read_num(&p, &hi) < 0 || hi < lo)
                r = -1;
        } else {
            hi = lo;
        }
        if (r == 0 && *p && *p != ',')
            r = -1;
        if (r < 0) {
            size_t len = strcspn(item, ",");
            r = dsl_seterr(err, DSL_EUSAGE,
                           "bad core list item '%.*s' in '%s' (expected N or N-M, N < %d, "
                           "joined by ',')",
                           (int)len, item, list, DSL_CPUBIND_MAX);
            break;
        }
        for (int c = lo; c <= hi; c++)
            seen[c] = 1;
        if (*p == ',' && !*++p)
            r = dsl_seterr(err, DSL_EUSAGE, "core list '%s' ends with ','", list);
    }
    size_t n = 0;
    for (int c = 0; r == 0 && c < DSL_CPUBIND_MAX; c++) {
        if (!seen[c])
            continue;
        if (n == cap) {
            r = dsl_seterr(err, DSL_EUSAGE, "core list '%s' names too many cores", list);
            break;
        }
        out[n++] = c;
    }
    free(seen);
    return r < 0 ? r : (int)n;
}

int dsl_cpubind_numa(const char *root, int *node_of, size_t cap)
{
    for (size_t c = 0; c < cap; c++)
        node_of[c] = -1;
    DIR *d = opendir(root);
    if (!d)
        return 0;
    int nodes = 0, *cores = dsl_xmalloc(cap * sizeof(int));
    struct dirent *e;
    while ((e = readdir(d))) {
        int node;
        if (strncmp(e->d_name, "node", 4) || dsl_parse_int(e->d_name + 4, 0, 1 << 20, &node) < 0)
            continue;
        char *path = dsl_xasprintf("%s/%s/cpulist", root, e->d_name), buf[8192], err[DSL_ERR_LEN];
        FILE *f = fopen(path, "re");
        free(path);
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = '\0';
        buf[strcspn(buf, "\n")] = '\0';
        int n = buf[0] ? dsl_cpubind_parse(buf, cores, cap, err) : 0;
        for (int k = 0; k < n; k++)
            if ((size_t)cores[k] < cap) /* a core beyond the table has no entry */
                node_of[cores[k]] = node;
        nodes += n > 0;
    }
    closedir(d);
    free(cores);
    return nodes;
}

struct ordered {
    int core, node;
};

static int by_node(const void *a, const void *b)
{
    const struct ordered *x = a, *y = b;
    if (x->node != y->node)
        return x->node < y->node ? -1 : 1;
    return x->core < y->core ? -1 : x->core > y->core;
}

static int by_core(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return x < y ? -1 : x > y;
}

int dsl_cpubind_split(const int *cores, size_t n, const int *node_of, int nranks, int *out,
                      int *per, char *err)
{
    if (nranks < 1 || n < (size_t)nranks)
        return dsl_seterr(err, DSL_EUSAGE,
                          "%zu core(s) cannot be bound to %d rank(s): each rank needs one "
                          "of its own",
                          n, nranks);
    struct ordered *o = dsl_xmalloc(n * sizeof(*o));
    for (size_t i = 0; i < n; i++) {
        o[i].core = cores[i];
        /* unknown nodes sort last, in core order */
        o[i].node = node_of && node_of[cores[i]] >= 0 ? node_of[cores[i]] : 1 << 30;
    }
    qsort(o, n, sizeof(*o), by_node);
    int k = (int)(n / (size_t)nranks);
    for (int r = 0; r < nranks; r++) {
        for (int i = 0; i < k; i++)
            out[r * k + i] = o[r * k + i].core;
        qsort(out + r * k, (size_t)k, sizeof(int), by_core);
    }
    free(o);
    *per = k;
    return 0;
}

void dsl_cpubind_format(const int *cores, size_t n, char *buf, size_t len)
{
    size_t w = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && w + 1 < len;) {
        size_t j = i;
        while (j + 1 < n && cores[j + 1] == cores[j] + 1)
            j++;
        int m = j > i ? snprintf(buf + w, len - w, "%s%d-%d", i ? "," : "", cores[i], cores[j])
                      : snprintf(buf + w, len - w, "%s%d", i ? "," : "", cores[i]);
        if (m < 0 || (size_t)m >= len - w)
            break;
        w += (size_t)m;
        i = j + 1;
    }
}
