/* Addresses and ports for tests on 127.0.0.1. */
#ifndef SLUICE_TESTS_LIB_NET_H
#define SLUICE_TESTS_LIB_NET_H

/* A TCP port that was free a moment ago on 127.0.0.1. */
int free_port(void);

/* The port of addr (HOST:PORT, the part after its last ':'), or -1 when it has no ':'. */
int addr_port(const char *addr);

#endif
