/* libFuzzer target: arbitrary bytes as one client's stream into the store's frame parser. */
#include <stddef.h>
#include <stdint.h>

#include "comm/store_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsl_store_proto_feed(data, size);
    return 0;
}
