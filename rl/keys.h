/* The run key and the programs' security flags (README "Security"): one
 * CURVE keypair per run, shared by the agent and its observers, kept in
 * DIR/tributary.key; --keys DIR turns encryption and authentication on,
 * --insecure runs without, and a run whose addresses are not all loopback
 * must say which. */
#ifndef TRIB_RL_KEYS_H
#define TRIB_RL_KEYS_H

#include <stdbool.h>

#include "rl/config.h"
#include "rpc/rpc.h"

/* The key file in a key directory. Text, mode 0600:
 *     # comment lines and blank lines are allowed
 *     public = <40 Z85 characters>
 *     secret = <40 Z85 characters>
 * The public key must be the secret key's. */
#define RL_KEY_FILE "tributary.key"

struct rl_keys {
    char path[512];                 /* DIR/tributary.key */
    char public_key[41], secret_key[41];
};

/* Makes a new run key in DIR/tributary.key: DIR is created (mode 0700) if
 * missing, the file (mode 0600) is never overwritten. 0 with *k filled, or
 * -1 with rl_last_error(). Blocks on the file system. */
int rl_keys_make(const char *dir, struct rl_keys *k);

/* `PROG --make-keys DIR`: rl_keys_make, then a line on stdout naming the
 * file, its public key's start and what to do with it (or the error on
 * stderr). Returns the exit status: 0, or 1. */
int rl_keys_make_cli(const char *prog, const char *dir);

/* Reads DIR/tributary.key into *k. -1 with rl_last_error() naming the file
 * when it is missing or unreadable, readable by group or others (the fix:
 * chmod 600), not a regular file, larger than 4 KiB, has a line that is not
 * "public = KEY" / "secret = KEY" or a key that is not 40 Z85 characters,
 * lacks a line, or holds a public key that is not the secret key's. */
int rl_keys_load(const char *dir, struct rl_keys *k);

/* Turns CURVE on in *o with k's keypair; the key of the workers it
 * connects to and the only key it admits are k's public key. k must
 * outlive rpc_init (which copies the keys). */
void rl_keys_apply(const struct rl_keys *k, struct rpc_opts *o);

/* Whether an address ("tcp://HOST:PORT" or a bare HOST) resolves only to
 * loopback addresses (127.0.0.0/8, ::1). A wildcard, an interface name or
 * a name that does not resolve is not loopback. May block on DNS. */
bool rl_addr_is_loopback(const char *addr);

/* The security flags of tributary-agent, -observer and -train. */
struct rl_security {
    const char *prog;               /* for messages */
    char keys_dir[400];             /* --keys DIR ("": none) */
    bool insecure;                  /* --insecure */
    bool curve;                     /* after rl_security_resolve: the keys below are loaded */
    struct rl_keys keys;
};

/* Writes rl_config_parse extras for --keys DIR and --insecure into
 * out[0..2), filling *s (prog: the program's name, for messages); returns 2. */
struct argv_opt;
int rl_security_opts(struct rl_security *s, const char *prog, struct argv_opt *out);

/* --keys DIR for a getopt-style parser. 0, or -1 after printing why on
 * stderr (prefixed with s->prog). */
int rl_security_set_keys(struct rl_security *s, const char *dir);

/* Settles how the run talks, once the flags are parsed: with --keys, loads
 * the key (s->curve); with --insecure, plain; with neither, plain if every
 * address of addrs (NULL-terminated) is loopback, else refused. 0, or -1
 * with rl_last_error(): "--keys and --insecure exclude each other", a key
 * file error (rl_keys_load), or "multi-host runs are encrypted: pass --keys
 * DIR (make one with tributary-agent --make-keys DIR) or --insecure (ADDR is
 * not a loopback address)". */
int rl_security_resolve(struct rl_security *s, const char *const *addrs);

/* The first 8 characters of a Z85 key and "...", for messages. */
void rl_key_short(const char *z85, char out[12]);

#endif
