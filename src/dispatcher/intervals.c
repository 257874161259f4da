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

uint32_t dispatcher_disconnect_grace_ms(uint32_t option_ms, uint32_t timeout_ms)
{
    if (option_ms == UINT32_MAX)
        return UINT32_MAX;
    uint32_t ms = option_ms ? option_ms : 5000u;
    uint32_t floor = 2 * dispatcher_heartbeat_ms(timeout_ms);
    if (ms < floor)
        ms = floor;
    return ms < timeout_ms ? ms : timeout_ms;
}
