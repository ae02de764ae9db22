/* docs/config.md's key tables as dstrain keys prints them (src/train/config_doc.c) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/train/train_config.h"
#include "../test.h"

/* what dsl_train_config_doc prints for section (NULL: all), owned by the caller */
static char *doc_of(const char *section, int *rc, char *err)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    ASSERT(f != NULL);
    *rc = dsl_train_config_doc(f, section, err);
    fclose(f);
    return out;
}

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

TEST(every_key_with_a_flag_should_have_one_row_in_the_docs)
{
    char err[DSL_ERR_LEN] = "", row[160];
    int rc;
    char *all = doc_of(NULL, &rc, err);
    ASSERT_EQ(rc, 0);
    struct dsl_train_config_flag f;
    size_t n = 0;
    for (size_t i = 0; dsl_train_config_flag_at(i, &f); i++, n++) {
        snprintf(row, sizeof(row), "| `%s` |", f.key);
        ASSERT_EQ(count(all, row), 1);
    }
    ASSERT(n > 30);
    /* the keys without a flag are there too, one section heading per page section */
    ASSERT_EQ(count(all, "| `fp16.hysteresis` |"), 1);
    ASSERT_EQ(count(all, "| `bfloat16.enabled` |"), 1);
    ASSERT_EQ(count(all, "## "), 8);
    free(all);
}

TEST(a_row_should_show_type_default_bounds_and_notes)
{
    char err[DSL_ERR_LEN] = "";
    int rc;
    char *s = doc_of("optimizer", &rc, err);
    ASSERT_EQ(rc, 0);
    ASSERT_CONTAINS(s, "| key | type | default | allowed | notes |\n");
    ASSERT_CONTAINS(s, "| `optimizer.params.eps` | number | 1e-8 | 0..1 | Adam's epsilon |\n");
    ASSERT_CONTAINS(s, "| `optimizer.params.betas` | two numbers | [0.9, 0.999] |");
    ASSERT_CONTAINS(s, "| `optimizer.type` | string | `Adam` | `Adam`, `AdamW`, `SGD` |");
    /* a default init sets in code, not through the row's word, shows as it is */
    ASSERT_CONTAINS(s, "| `optimizer.params.adam_w_mode` | boolean | true | true, false |");
    ASSERT(!strstr(s, "scheduler."));
    free(s);
    s = doc_of("dstrain", &rc, err);
    ASSERT_EQ(rc, 0);
    ASSERT_CONTAINS(s, "| `dstrain.model.hidden` | integers | [1024, 1024] |");
    ASSERT_CONTAINS(s, "| `dstrain.steps` | integer | 0 | 0..2^53 |");
    ASSERT_CONTAINS(s, "| `dstrain.backend` | string | `auto` | `auto`, `tcp`, `nccl` |");
    ASSERT_CONTAINS(s, "| `dstrain.checkpoint_dir` | string | none |");
    free(s);
    s = doc_of("scheduler", &rc, err);
    ASSERT_CONTAINS(s, "| `scheduler.params.warmup_num_steps` | integer | 1000 | 0..2^53 |");
    ASSERT_CONTAINS(s, "| `scheduler.params.cos_min_ratio` | number | 0.0001 | 0..1 |");
    free(s);
    s = doc_of("precision", &rc, err);
    ASSERT_CONTAINS(s, "| `fp16.min_loss_scale` | number | 1 | 1e-30..1e30 |");
    free(s);
}

TEST(an_unknown_section_should_be_a_usage_error_listing_the_sections)
{
    char err[DSL_ERR_LEN] = "";
    int rc;
    char *s = doc_of("optimiser", &rc, err);
    ASSERT_EQ(rc, DSL_EUSAGE);
    ASSERT_STR_EQ(s, "");
    ASSERT_CONTAINS(err, "unknown section 'optimiser'");
    ASSERT_CONTAINS(err, "batch, optimizer, scheduler,");
    free(s);
}

TEST(a_cell_should_escape_pipes)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    ASSERT(f != NULL);
    dsl_train_doc_cell(f, "tcp|nccl");
    fclose(f);
    ASSERT_STR_EQ(out, "| tcp\\|nccl ");
    free(out);
}

TEST_MAIN()
