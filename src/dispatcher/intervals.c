#include "intervals.h"

uint32_t dispatcher_heartbeat_ms(uint32_t timeout_ms)
{
    uint32_t ms = timeout_ms / 5;
    if (ms < 50)
        ms = 50;
    if (ms > 1000)
        ms = 1000;
    return ms;
}
