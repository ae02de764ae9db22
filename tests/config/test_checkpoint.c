#include "test.h"
int main(int argc, char **argv)
{
    return RUN_TESTS(argc, argv);
}
