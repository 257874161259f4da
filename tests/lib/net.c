#include "lib/net.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

/* The first port of the ephemeral range; 32768 (Linux's default) when it cannot be read. */
static int ephemeral_low(void)
{
    int lo = 32768, hi = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2)
            lo = 32768;
        fclose(f);
    }
    return lo;
}

int free_ports(int *ports, int n)
{
    int lo = 10000, hi = ephemeral_low(); /* [lo, hi) */
    if (n <= 0 || n > 64)
        return -1;
    if (hi - lo < 1000)
        lo = 1024;
    if (hi - lo < 1000)
        return -1;
    unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
    int fds[64], found[64], got = 0;
    for (int tries = 0; got < n && tries < 1000; tries++) {
        seed = seed * 1103515245u + 12345u;
        int port = lo + (int)((seed >> 8) % (unsigned)(hi - lo));
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                                .sin_port = htons((uint16_t)port)};
        if (fd < 0)
            break;
        if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) { /* in use (or the same as one) */
            close(fd);
            continue;
        }
        fds[got] = fd;
        found[got++] = port;
    }
    for (int i = 0; i < got; i++)
        close(fds[i]);
    if (got != n)
        return -1;
    memcpy(ports, found, (size_t)n * sizeof *ports);
    return 0;
}

int addr_port(const char *addr)
{
    const char *colon = strrchr(addr, ':');
    return colon ? atoi(colon + 1) : -1;
}
