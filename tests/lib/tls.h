/* TLS for integration tests: the certificates of make_certs.sh, made once per test program at run
 * time in a directory of its own (no key is kept in the repository), and security settings that
 * use them. */
#ifndef SLUICE_TESTS_LIB_TLS_H
#define SLUICE_TESTS_LIB_TLS_H

struct security_ctx;

/* The directory holding ca.pem, node.pem, expired.pem, wronghost.pem, ca2.pem, other.pem and
 * their keys (see make_certs.sh). Made on the first call; exits the program when openssl fails. */
const char *tls_certs_dir(void);

/* The path of file (e.g. "node.pem") in that directory, in one of a few rotating static buffers. */
const char *tls_path(const char *file);

/* Settings for sides (enum security_side bits) with the certificate and key NAME.pem/NAME.key
 * (NULL: none) and the CA CA.pem (NULL: none). Exits the program when they do not load. */
struct security_ctx *tls_test_sec(const char *name, const char *ca, int sides);

/* Removes the directory, if it was made. */
void tls_certs_cleanup(void);

#endif
