/* dslaunch: the launcher's main(). Everything lives in the library (src/launch/). */
#include "dslaunch/launch.h"
#include "common/banned.h"

int main(int argc, char **argv)
{
    return dsl_launch_main(argc, argv);
}
