/*
 * ZeRO-Offload's keys (offload_optimizer, offload_param, the legacy cpu_offload): read
 * with DeepSpeed's meaning, checked against the stage, "nvme" refused; once the device
 * is known, a no-op on the CPU and an error on the GPU, whose trainer cannot honour
 * them yet (training on regardless could run out of the memory the user meant to free).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/train/train_config.h"
#include "dslaunch/train/trainer_settings.h"
#include "test.h"
#include "test_fs.h"

static const struct {
    const char *zero;     /* the zero_optimization object */
    const char *opt, *par; /* the devices read (NULL: none given) */
    int code;             /* 0, or the error's code */
    const char *err;      /* substring of the error */
} cases[] = {
    {"{\"stage\": 1, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}}",
     "cpu", "none", 0, NULL},
    {"{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}, "
     "\"offload_param\": {\"device\": \"cpu\", \"pin_memory\": false}}",
     "cpu", "cpu", 0, NULL},
    {"{\"stage\": 2, \"offload_optimizer\": {\"device\": \"none\"}}", "none", "none", 0, NULL},
    {"{\"stage\": 2, \"cpu_offload\": true}", "cpu", "none", 0, NULL},
    {"{\"stage\": 2, \"cpu_offload\": false}", "none", "none", 0, NULL},
    {"{\"stage\": 0, \"offload_optimizer\": {\"device\": \"cpu\"}}", NULL, NULL, DSL_ECONFIG,
     "'zero_optimization.offload_optimizer' needs ZeRO stage 1, 2 or 3"},
    {"{\"stage\": 0, \"cpu_offload\": true}", NULL, NULL, DSL_ECONFIG,
     "'zero_optimization.offload_optimizer' needs ZeRO stage 1, 2 or 3"},
    {"{\"stage\": 2, \"offload_param\": {\"device\": \"cpu\"}}", NULL, NULL, DSL_ECONFIG,
     "'zero_optimization.offload_param' needs ZeRO stage 3 (it moves the parameter shards), "
     "and 'zero_optimization.stage' is 2"},
    {"{\"stage\": 3, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/nvme\"}}",
     NULL, NULL, DSL_ECONFIG,
     "'zero_optimization.offload_param.device' \"nvme\" is not supported by dstrain"},
    {"{\"stage\": 1, \"offload_optimizer\": {\"device\": \"nvme\"}}", NULL, NULL, DSL_ECONFIG,
     "'zero_optimization.offload_optimizer.device' \"nvme\" is not supported"},
    {"{\"stage\": 1, \"offload_optimizer\": {\"device\": \"gpu\"}}", NULL, NULL, DSL_ECONFIG,
     "bad value 'gpu' for 'zero_optimization.offload_optimizer.device' (expected one of "
     "\"none\", \"cpu\", \"nvme\")"},
    {"{\"stage\": 1, \"offload_optimizer\": \"cpu\"}", NULL, NULL, DSL_ECONFIG,
     "expected an object for 'zero_optimization.offload_optimizer'"},
};

static char *config_text(const char *zero)
{
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    ASSERT(f != NULL);
    fprintf(f, "{\"train_batch_size\": 8, \"zero_optimization\": %s}", zero);
    fclose(f);
    return s;
}

TEST(offload_keys_should_be_read_and_checked_against_the_stage)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct dsl_train_config cfg;
        char err[DSL_ERR_LEN] = "";
        char *text = config_text(cases[i].zero);
        dsl_train_config_init(&cfg);
        int r = dsl_train_config_parse(&cfg, "t.json", text, strlen(text), 1, err);
        if (r != cases[i].code)
            fprintf(stderr, "case %zu: %s -> %d %s\n", i, text, r, err);
        ASSERT_EQ(r, cases[i].code);
        if (r == 0) {
            ASSERT_STR_EQ(cfg.zero.offload_optimizer ? cfg.zero.offload_optimizer : "none",
                          cases[i].opt);
            ASSERT_STR_EQ(cfg.zero.offload_param ? cfg.zero.offload_param : "none",
                          cases[i].par);
            ASSERT_EQ(cfg.warnings.nr, 0);
        } else {
            ASSERT_CONTAINS(err, cases[i].err);
        }
        dsl_train_config_release(&cfg);
        free(text);
    }
}

TEST(offload_sections_other_keys_should_be_deepspeeds_not_unknown)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN] = "";
    char *text = config_text("{\"stage\": 2, \"offload_optimizer\": {\"device\": \"none\", "
                             "\"buffer_count\": 4, \"ratio\": 0.5}}");
    dsl_train_config_init(&cfg);
    ASSERT_OK(dsl_train_config_parse(&cfg, "t.json", text, strlen(text), 1, err));
    ASSERT_EQ(cfg.warnings.nr, 2);
    ASSERT_CONTAINS(cfg.warnings.v[0], "DeepSpeed key 'zero_optimization.offload_optimizer."
                                       "buffer_count' is not implemented by dstrain");
    ASSERT_CONTAINS(cfg.warnings.v[1], "'zero_optimization.offload_optimizer.ratio'");
    dsl_train_config_release(&cfg);
    free(text);
}

/* verify() of a config file, on a rank placed on the CPU or (s.gpu set by hand: no
 * device needed) on a GPU; returns what verify() returned */
static int verify_file(const char *zero, int gpu, char *err)
{
    char *dir = test_tmpdir("offload");
    char path[256];
    snprintf(path, sizeof(path), "%s/ds.json", dir);
    char *text = config_text(zero);
    test_write_file(path, text, 0600);
    free(text);
    struct dsl_train_settings s;
    char *argv[] = {(char *)"dstrain", (char *)"--config", path, (char *)"--backend",
                    (char *)"tcp", NULL};
    ASSERT_OK(dsl_train_settings_parse(&s, 5, argv, err));
    s.placed = 1;
    s.gpu = gpu;
    int r = dsl_train_settings_verify(&s, 0, 1, err);
    dsl_train_settings_release(&s);
    test_tmpdir_remove(dir);
    return r;
}

TEST(offload_should_be_a_no_op_on_the_cpu_and_refused_on_the_gpu)
{
    char err[DSL_ERR_LEN] = "";
    const char *both = "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}, "
                       "\"offload_param\": {\"device\": \"cpu\"}}";
    ASSERT_OK(verify_file(both, 0, err));
    ASSERT_EQ(verify_file("{\"stage\": 2, \"cpu_offload\": true}", 0, err), 0);
    ASSERT_EQ(verify_file("{\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\"}}", 1,
                          err),
              DSL_ENOTSUP);
    ASSERT_CONTAINS(err, "'zero_optimization.offload_optimizer' to \"cpu\" is not "
                         "implemented on the GPU yet: set its device to \"none\"");
    ASSERT_EQ(verify_file("{\"stage\": 2, \"cpu_offload\": true}", 1, err), DSL_ENOTSUP);
    ASSERT_CONTAINS(err, "on the GPU yet");
    ASSERT_OK(verify_file("{\"stage\": 2, \"offload_optimizer\": {\"device\": \"none\"}}", 1,
                          err));
}

TEST_MAIN()
