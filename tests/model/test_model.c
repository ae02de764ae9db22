/*
 * Unit tests of the MLP and the sampler: a finite-difference check of the gradient
 * (with weights split into several segments, as stage 2 sees them), the world-size
 * invariance of the sampler, and the idx reader's checks of a file's header against
 * its size. (The optimizer's tests are in tests/device/test_optimizer.c.)
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "dslaunch/model/data.h"
#include "dslaunch/common/error.h"
#include "dslaunch/model/model.h"

#include "model/model_mlp_impl.h"
#include "test.h"
#include "full_sink.h"
#include "dslaunch/common/banned.h"


static void make_tiny(struct dsl_model *m, size_t seg_max, size_t batch)
{
    struct dsl_model_spec sp = {.type = "mlp", .in_dim = 7, .out_dim = 4, .nhidden = 2,
                                .hidden = {6, 5}, .max_batch = batch, .seg_max = seg_max};
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_model_create(m, &sp, err));
}

static void fill(float *x, size_t n, unsigned seed)
{
    srand(seed);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
}

TEST(mlp_gradient_should_match_finite_differences)
{
    struct dsl_model m;
    make_tiny(&m, 12, 5);
    ASSERT_EQ(m.nparams, 6 * 8 + 5 * 7 + 4 * 6);
    float *p = calloc(m.nparams, sizeof(float)), *g = calloc(m.nparams, sizeof(float));
    float x[5 * 7];
    int32_t y[5] = {0, 3, 1, 2, 3};
    m.ops->init_params(&m, p, 42);
    fill(x, 5 * 7, 7);
    struct full_sink fs = {g, &m, 0, m.nparams, 0};
    struct dsl_grad_sink sink = {.dest = fs_dest, .done = fs_done, .ctx = &fs};
    struct dsl_model_stats st;
    ASSERT_OK(m.ops->forward_backward(&m, p, x, y, 5, 1.0f, &sink, &st));
    ASSERT_EQ(fs.ndone, m.nsegs);
    ASSERT_EQ(fs.last_off, 0);
    ASSERT(m.nsegs > 6); /* weights were split into row blocks */
    double worst = 0.0;
    for (size_t i = 0; i < m.nparams; i++) {
        float keep = p[i];
        struct dsl_model_stats a, b;
        p[i] = keep + 1e-3f;
        ASSERT_OK(m.ops->evaluate(&m, p, x, y, 5, &a));
        p[i] = keep - 1e-3f;
        ASSERT_OK(m.ops->evaluate(&m, p, x, y, 5, &b));
        p[i] = keep;
        double fd = (a.loss_sum - b.loss_sum) / 2e-3;
        double e = fabs(fd - g[i]) / (1.0 + fabs(g[i]));
        if (e > 1e-3)
            fprintf(stderr, "i=%zu fd=%g an=%g\n", i, fd, (double)g[i]);
        worst = e > worst ? e : worst;
    }
    printf("# max relative gradient error %.3g over %zu params\n", worst, m.nparams);
    ASSERT(worst < 2e-3);
    free(p);
    free(g);
    dsl_model_release(&m);
}

TEST(mlp_gradient_should_not_depend_on_segment_size)
{
    struct dsl_model a, b;
    make_tiny(&a, 0, 3);
    make_tiny(&b, 7, 3);
    float *p = calloc(a.nparams, sizeof(float));
    float *ga = calloc(a.nparams, sizeof(float)), *gb = calloc(a.nparams, sizeof(float));
    float x[3 * 7];
    int32_t y[3] = {1, 2, 0};
    a.ops->init_params(&a, p, 3);
    fill(x, 3 * 7, 9);
    struct full_sink sa = {ga, &a, 0, a.nparams, 0}, sb = {gb, &b, 0, b.nparams, 0};
    struct dsl_grad_sink ka = {.dest = fs_dest, .done = fs_done, .ctx = &sa},
                         kb = {.dest = fs_dest, .done = fs_done, .ctx = &sb};
    struct dsl_model_stats st;
    ASSERT_OK(a.ops->forward_backward(&a, p, x, y, 3, 1.0f, &ka, &st));
    ASSERT_OK(b.ops->forward_backward(&b, p, x, y, 3, 1.0f, &kb, &st));
    ASSERT(a.nsegs < b.nsegs);
    ASSERT(memcmp(ga, gb, a.nparams * sizeof(float)) == 0);
    free(p);
    free(ga);
    free(gb);
    dsl_model_release(&a);
    dsl_model_release(&b);
}

/* a sink that also has need() and loss(): what forward asked for, in order */
struct need_sink {
    struct need_rec r; /* first: fs_done and nr_need take the sink */
    int loss_calls, loss_before_dest;
    double loss_seen;
};

static float *ns_dest(void *ctx, size_t seg)
{
    struct need_sink *s = ctx;
    if (s->r.fs.ndone == 0 && s->loss_calls == 1)
        s->loss_before_dest = 1;
    return fs_dest(&s->r.fs, seg);
}

static void ns_loss(void *ctx, const struct dsl_model_stats *st)
{
    struct need_sink *s = ctx;
    s->loss_calls++;
    s->loss_seen = st->loss_sum;
}

/* the trainer's stream_end relies on it: the first layer block by block, in the order
 * its gradient segments leave backward, each asked for before it is read; the loss
 * handed over once, before backward's first segment; the same bits as whole layers */
TEST(mlp_forward_should_ask_for_the_first_layer_block_by_block_and_give_the_same_bits)
{
    struct dsl_model m;
    struct dsl_model_spec sp = {.type = "mlp", .in_dim = 50, .out_dim = 10, .nhidden = 2,
                                .hidden = {37, 20}, .max_batch = 16, .seg_max = 400};
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_model_create(&m, &sp, err));
    float *p = calloc(m.nparams, sizeof(float)), *g1 = calloc(m.nparams, sizeof(float)),
          *g2 = calloc(m.nparams, sizeof(float)), x[16 * 50];
    int32_t y[16];
    for (size_t i = 0; i < 16; i++)
        y[i] = (int32_t)(i * 7 % 10);
    m.ops->init_params(&m, p, 3);
    fill(x, 16 * 50, 9);
    struct full_sink whole = {g1, &m, 0, m.nparams, 0};
    struct dsl_grad_sink k1 = {.dest = fs_dest, .done = fs_done, .ctx = &whole};
    struct need_sink ns = {.r = {.fs = {g2, &m, 0, m.nparams, 0}}};
    struct dsl_grad_sink k2 = {.dest = ns_dest, .done = fs_done, .need = nr_need,
                               .ctx = &ns, .loss = ns_loss};
    struct dsl_model_stats s1, s2;
    ASSERT_OK(m.ops->forward_backward(&m, p, x, y, 16, 1.0f, &k1, &s1));
    ASSERT_OK(m.ops->forward_backward(&m, p, x, y, 16, 1.0f, &k2, &s2));
    ASSERT(memcmp(g1, g2, m.nparams * sizeof(float)) == 0);
    ASSERT(s1.loss_sum == s2.loss_sum && s1.correct == s2.correct);
    ASSERT_EQ(ns.loss_calls, 1);
    ASSERT(ns.loss_before_dest);
    ASSERT(ns.loss_seen == s2.loss_sum);
    /* layer 0 (37 rows of 50): the bias, then blocks of 8 rows, last block first, in
     * the order of its segments; then the two later layers whole */
    size_t k = 0, nblk = 0;
    ASSERT_EQ(ns.r.need_off[k], 37 * 50);
    ASSERT_EQ(ns.r.need_len[k++], 37);
    for (size_t i = 0; i < m.nsegs; i++) {
        if (m.segs[i].layer != 0 || m.segs[i].off >= 37 * 50)
            continue;
        ASSERT_EQ(ns.r.need_off[k], m.segs[i].off);
        ASSERT_EQ(ns.r.need_len[k++], m.segs[i].len);
        nblk++;
    }
    ASSERT_EQ(nblk, 5);
    ASSERT_EQ(ns.r.need_off[k], 37 * 51);
    ASSERT_EQ(ns.r.need_len[k++], 20 * 38);
    ASSERT_EQ(ns.r.need_len[k++], 10 * 21);
    ASSERT_EQ(ns.r.nneed, k);
    free(p);
    free(g1);
    free(g2);
    dsl_model_release(&m);
}

/* the CUDA MLP walks dsl_mlp_layout_need_plan (it cannot run here): the plan must be
 * the CPU model's need() calls, call for call, and its blocks must cover every output
 * column of every layer exactly once */
TEST(mlp_need_plan_should_be_the_cpu_models_need_calls)
{
    static const struct dsl_model_spec specs[] = {
        {.type = "mlp", .in_dim = 50, .out_dim = 10, .nhidden = 2, .hidden = {37, 20},
         .max_batch = 4, .seg_max = 400},
        {.type = "mlp", .in_dim = 13, .out_dim = 5, .nhidden = 2, .hidden = {17, 9},
         .max_batch = 4, .seg_max = 40},
        {.type = "mlp", .in_dim = 7, .out_dim = 4, .nhidden = 1, .hidden = {6},
         .max_batch = 4, .seg_max = 0}, /* whole tensors: one block */
        {.type = "mlp", .in_dim = 9, .out_dim = 3, .nhidden = 0, .max_batch = 4,
         .seg_max = 5}, /* one layer, a block per row (seg_max below in_dim) */
        {.type = "mlp", .in_dim = 6, .out_dim = 4, .nhidden = 1, .hidden = {11},
         .max_batch = 4, .seg_max = 20, .dtype = DSL_BFLOAT16},
    };
    for (size_t c = 0; c < sizeof(specs) / sizeof(specs[0]); c++) {
        char err[DSL_ERR_LEN];
        struct dsl_model m, shape;
        struct dsl_mlp_layout lay;
        ASSERT_OK(dsl_model_create(&m, &specs[c], err));
        ASSERT_OK(dsl_mlp_layout_build(&lay, &shape, &specs[c], err));
        dsl_model_release(&shape); /* only the layout is wanted */
        /* g: fp32-sized, as full_sink hands out dest = g + off for any dtype */
        size_t esz = dsl_dtype_size(specs[c].dtype);
        float *p = calloc(m.nparams, esz), *g = calloc(m.nparams, sizeof(float)), x[4 * 50];
        int32_t y[4] = {0, 1, 2, 1};
        fill(x, 4 * specs[c].in_dim, 5);
        struct need_sink ns = {.r = {.fs = {g, &m, 0, m.nparams, 0}}};
        struct dsl_grad_sink k = {.dest = ns_dest, .done = fs_done, .need = nr_need,
                                  .ctx = &ns};
        struct dsl_model_stats st;
        ASSERT_OK(m.ops->forward_backward(&m, p, x, y, 4, 1.0f, &k, &st));

        struct dsl_mlp_need *plan = calloc(m.nsegs + lay.nlayers, sizeof(*plan));
        size_t np = dsl_mlp_layout_need_plan(&lay, &m, 1, plan);
        ASSERT_EQ(np, ns.r.nneed);
        size_t covered[DSL_MODEL_MAX_LAYERS] = {0}; /* output columns computed */
        unsigned char seen[DSL_MODEL_MAX_LAYERS][64] = {{0}};
        for (size_t i = 0; i < np; i++) {
            ASSERT_EQ(plan[i].off, ns.r.need_off[i]);
            ASSERT_EQ(plan[i].len, ns.r.need_len[i]);
            /* a block computes the columns of the rows it asked for, and no others */
            if (plan[i].rows)
                ASSERT(plan[i].len == plan[i].rows * lay.dims[plan[i].layer] ||
                       plan[i].off == lay.woff[plan[i].layer]);
            for (size_t r = plan[i].r0; r < plan[i].r0 + plan[i].rows; r++) {
                ASSERT(r < lay.dims[plan[i].layer + 1] && r < 64);
                ASSERT(!seen[plan[i].layer][r]++);
                covered[plan[i].layer]++;
            }
        }
        /* without need(): every layer whole, one entry each */
        ASSERT_EQ(dsl_mlp_layout_need_plan(&lay, &m, 0, plan), lay.nlayers);
        for (size_t l = 0; l < lay.nlayers; l++) {
            ASSERT_EQ(covered[l], lay.dims[l + 1]);
            ASSERT_EQ(plan[l].layer, l);
            ASSERT_EQ(plan[l].off, lay.woff[l]);
            ASSERT_EQ(plan[l].len, lay.dims[l + 1] * (lay.dims[l] + 1));
            ASSERT_EQ(plan[l].rows, lay.dims[l + 1]);
        }
        free(plan);
        free(p);
        free(g);
        dsl_model_release(&m);
    }
}

TEST(mlp_gradient_should_scale_exactly_with_a_power_of_two_loss_scale)
{
    /* backward is linear in dz, so 2^k x loss gives exactly 2^k x the gradient (no
     * overflow or subnormals at these magnitudes); the loss itself is unscaled */
    struct dsl_model m;
    make_tiny(&m, 12, 5);
    float *p = calloc(m.nparams, sizeof(float)), *g1 = calloc(m.nparams, sizeof(float));
    float *gs = calloc(m.nparams, sizeof(float)), x[5 * 7];
    int32_t y[5] = {0, 3, 1, 2, 3};
    m.ops->init_params(&m, p, 42);
    fill(x, 5 * 7, 7);
    struct full_sink f1 = {g1, &m, 0, m.nparams, 0}, fs = {gs, &m, 0, m.nparams, 0};
    struct dsl_grad_sink k1 = {.dest = fs_dest, .done = fs_done, .ctx = &f1},
                         ks = {.dest = fs_dest, .done = fs_done, .ctx = &fs};
    struct dsl_model_stats s1, ss;
    ASSERT_OK(m.ops->forward_backward(&m, p, x, y, 5, 1.0f, &k1, &s1));
    ASSERT_OK(m.ops->forward_backward(&m, p, x, y, 5, 1024.0f, &ks, &ss));
    ASSERT(s1.loss_sum == ss.loss_sum && s1.correct == ss.correct);
    check_scaled(g1, gs, m.nparams, 1024.0f);
    free(p);
    free(g1);
    free(gs);
    dsl_model_release(&m);
}

TEST(model_should_reject_an_unknown_type_and_bad_labels)
{
    struct dsl_model m;
    char err[DSL_ERR_LEN];
    struct dsl_model_spec sp = {.type = "transformer", .in_dim = 4, .out_dim = 2,
                                .max_batch = 1};
    ASSERT_EQ(dsl_model_create(&m, &sp, err), DSL_ECONFIG);
    ASSERT_CONTAINS(err, "unknown model type 'transformer'");
    make_tiny(&m, 0, 2);
    float *p = calloc(m.nparams, sizeof(float)), x[14] = {0};
    int32_t y[2] = {0, 4};
    struct dsl_model_stats st;
    ASSERT_EQ(m.ops->evaluate(&m, p, x, y, 2, &st), DSL_EDATA);
    free(p);
    dsl_model_release(&m);
}

TEST(sampler_should_pad_to_the_global_batch_and_reshuffle_per_epoch)
{
    struct dsl_sampler s;
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_sampler_init(&s, 10, 4, 1234, 1, 0, err));
    ASSERT_EQ(s.steps_per_epoch, 3);
    int seen[10] = {0};
    for (size_t st = 0; st < 3; st++)
        for (size_t i = 0; i < 4; i++)
            seen[dsl_sampler_step(&s, 0, st)[i]]++;
    for (int i = 0; i < 10; i++)
        ASSERT(seen[i] >= 1 && seen[i] <= 2);
    size_t e0[4], e1[4];
    memcpy(e0, dsl_sampler_step(&s, 0, 0), sizeof(e0));
    memcpy(e1, dsl_sampler_step(&s, 1, 0), sizeof(e1));
    ASSERT(memcmp(e0, e1, sizeof(e0)) != 0);
    ASSERT(memcmp(e0, dsl_sampler_step(&s, 0, 0), sizeof(e0)) == 0);
    dsl_sampler_release(&s);
    ASSERT_OK(dsl_sampler_init(&s, 10, 4, 1, 0, 1, err));
    ASSERT_EQ(s.steps_per_epoch, 2);
    ASSERT_EQ(dsl_sampler_step(&s, 0, 1)[3], 7);
    dsl_sampler_release(&s);
    ASSERT_EQ(dsl_sampler_init(&s, 3, 4, 1, 0, 1, err), DSL_ECONFIG);
}

TEST(fashion_mnist_should_name_the_package_when_missing)
{
    struct dsl_dataset tr, te;
    char err[DSL_ERR_LEN];
    struct dsl_data_opts o = {.name = "fashion_mnist", .path = "/nonexistent/fm"};
    ASSERT(dsl_data_load(&tr, &te, &o, err) < 0);
    ASSERT_CONTAINS(err, "/nonexistent/fm");
    ASSERT_CONTAINS(err, "dataset-fashion-mnist");
    o.name = "synthetic";
    o.synth_train = 100;
    o.synth_test = 10;
    o.synth_dim = 5;
    o.synth_classes = 3;
    ASSERT_OK(dsl_data_load(&tr, &te, &o, err));
    ASSERT_EQ(tr.n, 100);
    for (size_t i = 0; i < tr.n; i++)
        ASSERT(tr.y[i] >= 0 && tr.y[i] < 3);
    dsl_dataset_release(&tr);
    dsl_dataset_release(&te);
}

/* write bytes to path, gzip-compressed when gz */
static void write_file(const char *path, const void *data, size_t n, int gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        ASSERT(f != NULL);
        ASSERT_EQ(gzwrite(f, data, (unsigned)n), (int)n);
        ASSERT_EQ(gzclose(f), Z_OK);
        return;
    }
    FILE *f = fopen(path, "wb");
    ASSERT(f != NULL);
    ASSERT_EQ(fwrite(data, 1, n, f), n);
    ASSERT_EQ(fclose(f), 0);
}

TEST(idx_reader_should_read_plain_and_gzip_files)
{
    char dir[] = "/tmp/dsl_idx_XXXXXX", path[64], err[DSL_ERR_LEN];
    ASSERT(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/a.idx", dir);
    unsigned char f[4 + 8 + 6] = {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6};
    for (int gz = 0; gz < 2; gz++) {
        write_file(path, f, sizeof(f), gz);
        uint8_t *data;
        size_t count, dims[4], nd;
        ASSERT_OK(dsl_idx_read(path, &data, &count, dims, &nd, err));
        ASSERT_EQ(nd, 2);
        ASSERT_EQ(dims[0], 2);
        ASSERT_EQ(dims[1], 3);
        ASSERT_EQ(count, 6);
        ASSERT_EQ(data[5], 6);
        free(data);
    }
    unlink(path);
    rmdir(dir);
}

TEST(idx_reader_should_check_the_header_against_the_file_before_allocating)
{
    char dir[] = "/tmp/dsl_idx_XXXXXX", path[64], err[DSL_ERR_LEN];
    ASSERT(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/b.idx", dir);
    uint8_t *data = NULL;
    size_t count, dims[4], nd;
    /* 0x7fffffff x 0x7fffffff claimed by a file of 16 bytes, plain and gzip */
    static const unsigned char huge[] = {0, 0, 8, 2, 0x7f, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff,
                                         0xff, 1, 2, 3, 4};
    /* 64 MB claimed, 4 bytes there: gzip passes the ratio check at 1032:1 only for
       a bigger file, so the plain file says so, the short gzip one is truncated */
    static const unsigned char mid[] = {0, 0, 8, 1, 0x04, 0, 0, 0, 1, 2, 3, 4};
    static const unsigned char small[] = {0, 0, 8, 1, 0, 0, 0, 9, 1, 2, 3, 4};
    /* dimensions whose product overflows, a zero one, a wrong type, a FIFO (which
       would block a reader) */
    static const unsigned char ovf[] = {0, 0, 8, 3, 0, 0, 0, 3, 0x7f, 0xff, 0xff, 0xff,
                                        0x7f, 0xff, 0xff, 0xff, 1};
    static const unsigned char zero[] = {0, 0, 8, 1, 0, 0, 0, 0};
    static const unsigned char fl[] = {0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0};
    static const struct {
        const unsigned char *bytes;
        size_t n;
        int gz;
        const char *err;
    } cases[] = {
        {huge, sizeof(huge), 0,
         "b.idx': the idx header claims 4611686014132420609 bytes of data, the file holds 4"},
        {huge, sizeof(huge), 1, "more than a gzip file of"},
        {mid, sizeof(mid), 0, "the idx header claims 67108864 bytes of data, the file holds 4"},
        {small, sizeof(small), 1,
         "truncated idx data (the header claims 9 bytes, the file holds 4)"},
        {ovf, sizeof(ovf), 0, "bad idx dimension 2147483647"},
        {zero, sizeof(zero), 0, "bad idx dimension 0"},
        {fl, sizeof(fl), 0, "not an idx file of unsigned bytes"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_file(path, cases[i].bytes, cases[i].n, cases[i].gz);
        ASSERT_EQ(dsl_idx_read(path, &data, &count, dims, &nd, err), DSL_EDATA);
        ASSERT_CONTAINS(err, cases[i].err);
        ASSERT(data == NULL);
    }
    unlink(path);
    ASSERT_OK(mkfifo(path, 0600));
    ASSERT_EQ(dsl_idx_read(path, &data, &count, dims, &nd, err), -EINVAL);
    ASSERT_CONTAINS(err, "b.idx' is not a regular file");
    unlink(path);
    rmdir(dir);
}

TEST_MAIN()
