/* env.h: private to libcbcmn: the one way the library reads its CBCMN_*
 * environment variables (env.c). */
#ifndef CBCMN_ENV_H
#define CBCMN_ENV_H

/* The value of the variable name, or NULL when it is unset or the
 * process runs with AT_SECURE (set-user-ID, set-group-ID, file
 * capabilities, an LSM's transition): a privileged program linked with
 * libcbcmn takes nothing (where its statistics and trace rings go, its
 * backend, its topology, its lab seed) from the environment of the
 * unprivileged user who started it.  Any thread. */
const char *cbcmn__env(const char *name);

#endif
