/* sluice_version() (include/sluice/sluice.h): the one version, from CMake's project(VERSION),
 * written into the generated <sluice/version.h>. */
#include "sluice/sluice.h"

const char *sluice_version(void)
{
    return SLUICE_VERSION_STRING;
}
