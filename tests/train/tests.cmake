# Trainer tests (issue 6): model/optimizer/sampler units, and multi-rank runs of the
# real dstrain driven by tests/train/ranks.sh (ranks started by hand with the env
# contract, so they do not depend on the launcher).
dsl_unit_test(test_train_model SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model.c
              LIBS dsltrain)
dsl_unit_test(test_train_trainer SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_trainer.c
              LIBS dsltrain)
