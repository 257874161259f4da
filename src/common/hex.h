/* Hexadecimal digits. Pure, header-only. */
#ifndef SLUICE_COMMON_HEX_H
#define SLUICE_COMMON_HEX_H

/* The value of the hex digit c (0-9, a-f, A-F), or -1 when c is none. */
static inline int hex_digit_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

#endif
