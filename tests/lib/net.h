/* Addresses and ports for tests on 127.0.0.1. */
#ifndef SLUICE_TESTS_LIB_NET_H
#define SLUICE_TESTS_LIB_NET_H

/* A TCP port that was free a moment ago on 127.0.0.1. */
int free_port(void);

/* n distinct TCP ports free a moment ago on 127.0.0.1, for addresses that must be known before
 * their servers start (Raft's cluster list): taken below the kernel's ephemeral range
 * (ip_local_port_range), where no outgoing connection of another process can take one between
 * this check and the server's bind, as it can take a port that bind(0) handed out and released.
 * Returns 0, or -1 (ports unchanged). */
int free_ports(int *ports, int n);

/* The port of addr (HOST:PORT, the part after its last ':'), or -1 when it has no ':'. */
int addr_port(const char *addr);

#endif
